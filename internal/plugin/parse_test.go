package plugin

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// nodePods is a PodSource that knows one node, with its pod CIDRs.
type nodePods struct{ cidrs []netip.Prefix }

func (n nodePods) Lookup(_ context.Context, _, _, _, node string) (*podinfo.Info, error) {
	return &podinfo.Info{Node: &podinfo.Node{Object: podinfo.Object{Name: node}, PodCIDRs: n.cidrs}}, nil
}

func (nodePods) Ready() bool { return true }

// runADD runs an ADD of stdin as Main does (Plugin.run: stdin read,
// parsed, handed down to the hand-off check and the verb) and returns
// how many times the package parsed a config meanwhile.
func runADD(t *testing.T, p *Plugin, container string, stdin []byte) uint64 {
	t.Helper()
	for k, v := range map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": container, "CNI_IFNAME": "eth0",
		"CNI_NETNS": "/var/run/netns/" + container, "CNI_NETNS_OVERRIDE": "1", "CNI_PATH": "/opt/cni/bin", "CNI_ARGS": ""} {
		t.Setenv(k, v)
	}
	in := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(in, stdin, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stdin
	defer func() { os.Stdin = saved }()
	os.Stdin = f
	before := ParseCount()
	if e := p.run("test", time.Now().Add(Timeout)); e != nil {
		t.Fatalf("ADD: %v", e)
	}
	return ParseCount() - before
}

// TestMainParsesOnce: an ADD run as Main runs it parses its config once,
// the parsed config serving the hand-off check, the verb and (pod-aware,
// usePodCidr) the node's pod CIDRs, which are filled into the parsed
// value.
func TestMainParsesOnce(t *testing.T) {
	h := newHarness(t)
	if n := runADD(t, h.p, "c1", h.conf("1.1.0", v4Ranges)); n != 1 {
		t.Errorf("an ADD parsed its config %d times, want 1", n)
	}
	// Pod-aware: the node's pod CIDR comes from the in-process lookup.
	h.p.Pods = nodePods{cidrs: []netip.Prefix{netip.MustParsePrefix("10.250.3.0/24")}}
	h.out.Reset()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	conf := h.conf("1.1.0", `"ranges":[[{"subnet":"usePodCidr"}]],"kubernetes":{"agentSocket":"`+sock+`"}`)
	if n := runADD(t, h.p, "c2", conf); n != 1 {
		t.Errorf("a pod-aware ADD parsed its config %d times, want 1", n)
	}
	if !strings.Contains(h.out.String(), "10.250.3.") {
		t.Errorf("the pod-aware ADD's result %s holds no address of the node's pod CIDR 10.250.3.0/24", h.out)
	}
}

// TestValidateServeParsesOnce: ipkeeper-agent's way of running a verb,
// Validate and then ServeContext with the config Validate parsed, parses
// the config once.
func TestValidateServeParsesOnce(t *testing.T) {
	h := newHarness(t)
	args := h.args("c1", h.conf("1.1.0", v4Ranges))
	args.NetnsOverride = "1"
	before := ParseCount()
	conf, e := Validate("ADD", args)
	if e != nil {
		t.Fatal(e)
	}
	if _, e := h.p.ServeContext(t.Context(), "ADD", args, conf); e != nil {
		t.Fatal(e)
	}
	if n := ParseCount() - before; n != 1 {
		t.Errorf("Validate and ServeContext parsed the config %d times, want 1", n)
	}
}
