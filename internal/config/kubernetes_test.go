package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestKubernetesKey: ipam.kubernetes takes a kubeconfig, an agent socket
// or both (pod-aware allocation is on with either), IPv4 and IPv6 configs
// alike, paths cleaned.
func TestKubernetesKey(t *testing.T) {
	for _, tc := range []struct {
		name, kube      string
		ranges          string
		kubeconfig, soc string
	}{
		{"kubeconfig only v4", `{"kubeconfig": "/etc/cni/net.d/kc"}`, `[[{"subnet": "10.1.0.0/24"}]]`, "/etc/cni/net.d/kc", ""},
		{"kubeconfig only v6", `{"kubeconfig": "/etc/cni/net.d/kc"}`, `[[{"subnet": "fd01::/64"}]]`, "/etc/cni/net.d/kc", ""},
		{"agent socket only v4", `{"agentSocket": "/run/ipkeeper/agent.sock"}`, `[[{"subnet": "10.1.0.0/24"}]]`, "", "/run/ipkeeper/agent.sock"},
		{"agent socket only v6", `{"agentSocket": "/run/ipkeeper/agent.sock"}`, `[[{"subnet": "fd01::/64"}]]`, "", "/run/ipkeeper/agent.sock"},
		{"both, socket cleaned", `{"kubeconfig": "/k", "agentSocket": "/run//ipkeeper/./agent.sock"}`, `[[{"subnet": "10.1.0.0/24"}]]`, "/k", "/run/ipkeeper/agent.sock"},
		{"null kubeconfig beside a socket", `{"kubeconfig": null, "agentSocket": "/s"}`, `[[{"subnet": "fd01::/64"}]]`, "", "/s"},
		{"usePodCidr with the agent v4", `{"agentSocket": "/s"}`, `[[{"subnet": "usePodCidr"}]]`, "", "/s"},
		{"usePodCidrIPv6 with the agent v6", `{"agentSocket": "/s"}`, `[[{"subnet": "usePodCidrIPv6"}]]`, "", "/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(conf(`{"type": "ipkeeper", "kubernetes": `+tc.kube+`, "ranges": `+tc.ranges+`}`), testEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got.Kubeconfig != tc.kubeconfig || got.AgentSocket != tc.soc || !got.PodAware() {
				t.Fatalf("kubeconfig %q agentSocket %q pod-aware %v, want %q %q true", got.Kubeconfig, got.AgentSocket, got.PodAware(), tc.kubeconfig, tc.soc)
			}
		})
	}
	got, err := parse(conf(`{"type": "ipkeeper", "ranges": [[{"subnet": "10.1.0.0/24"}]]}`), testEnv(nil))
	if err != nil || got.PodAware() || !reflect.DeepEqual([]string{got.Kubeconfig, got.AgentSocket}, []string{"", ""}) {
		t.Fatalf("without ipam.kubernetes: %+v, %v; want pod-awareness off", got, err)
	}
}

// TestKubernetesKeyRejects: each refusal names the key and the problem.
func TestKubernetesKeyRejects(t *testing.T) {
	long := "/" + strings.Repeat("s", MaxSocketPath)
	k := func(kube, ranges string) []byte {
		return conf(`{"type": "ipkeeper", "kubernetes": ` + kube + `, "ranges": ` + ranges + `}`)
	}
	const v4, v6 = `[[{"subnet": "10.1.0.0/24"}]]`, `[[{"subnet": "fd01::/64"}]]`
	checkRejects(t, []rejectCase{
		{"neither key v4", k(`{}`, v4), "ipam.kubernetes.kubeconfig", []string{"is missing", "ipam.kubernetes.agentSocket"}},
		{"neither key, nulls v6", k(`{"kubeconfig": null, "agentSocket": null}`, v6), "ipam.kubernetes.kubeconfig", []string{"is missing"}},
		{"socket not a string v4", k(`{"agentSocket": 5}`, v4), "ipam.kubernetes.agentSocket", []string{"a string"}},
		{"socket empty v6", k(`{"agentSocket": ""}`, v6), "ipam.kubernetes.agentSocket", []string{"is empty"}},
		{"socket relative v4", k(`{"agentSocket": "run/agent.sock"}`, v4), "ipam.kubernetes.agentSocket", []string{`"run/agent.sock" is not an absolute path`}},
		{"socket with NUL v6", k(`{"agentSocket": "/s\u0000"}`, v6), "ipam.kubernetes.agentSocket", []string{"NUL"}},
		{"socket too long for sun_path v4", k(`{"agentSocket": "`+long+`"}`, v4), "ipam.kubernetes.agentSocket", []string{"108 bytes long", "limit of 107"}},
		{"bad kubeconfig beside a good socket v6", k(`{"kubeconfig": "kc", "agentSocket": "/s"}`, v6), "ipam.kubernetes.kubeconfig", []string{"not an absolute path"}},
		{"good kubeconfig beside a bad socket v4", k(`{"kubeconfig": "/kc", "agentSocket": ["/s"]}`, v4), "ipam.kubernetes.agentSocket", []string{"a string"}},
		{"usePodCidr without either v4", k(`{"kubeconfig": null}`, `[[{"subnet": "usePodCidr"}]]`), "ipam.kubernetes.kubeconfig", []string{"is missing"}},
	})
}

// TestWhereaboutsConfigWithAgent: a whereabouts config keeps its state in
// the Kubernetes API with the kubeconfig its kubernetes object names, and
// an agentSocket added beside that kubeconfig hands its verbs to the node's
// agent (the README's drop-in advice), IPv4 and IPv6 alike.
func TestWhereaboutsConfigWithAgent(t *testing.T) {
	for _, rng := range []string{"10.1.0.0/24", "fd01::/64"} {
		t.Run(rng, func(t *testing.T) {
			got, err := parse(conf(`{"type": "whereabouts", "range": "`+rng+`",
				"kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig", "agentSocket": "/run/ipkeeper/agent.sock"}}`), testEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got.Datastore.Type != DatastoreKubernetes || got.Datastore.Kubeconfig != "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig" ||
				got.AgentSocket != "/run/ipkeeper/agent.sock" {
				t.Fatalf("datastore %+v, agentSocket %q; want kubernetes with the whereabouts kubeconfig, and the socket", got.Datastore, got.AgentSocket)
			}
		})
	}
}
