package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// credsPool is the pool of the leaks the credential tests plant.
var credsPool = ipam.Pool{Name: "creds", CIDR: netipPrefix("10.77.0.0/24"), BlockSize: 28}

// TestDatastoreCredentials runs the controller (Run, as the binary does)
// on a kubernetes datastore whose config names a kubeconfig path that does
// not exist — the node's, as in deploy/config.yaml — and checks which
// credentials open the datastore, by whether a planted leak (an address of
// a pod that never existed) is released in the datastore's partition:
//   - --config: the controller's own --kubeconfig, never the config's path;
//   - --datastore-kubeconfig: that file, while --kubeconfig's account may
//     read pods and nodes but not the datastore;
//   - the same account without --datastore-kubeconfig fails with
//     Forbidden and releases nothing (so the case above shows the flag);
//   - without --config: IPKEEPER_DATASTORE_KUBECONFIG, the controller's
//     environment.
func TestDatastoreCredentials(t *testing.T) {
	s := kubetest.Require(t, srv)
	base, node := namespaceAndNode(t, s, "dc")
	controllerKubeconfig := s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller")
	noDatastore := watcherKubeconfig(t, s, base)
	missing := filepath.Join(t.TempDir(), "node", "ipkeeper-kubeconfig")

	cases := []struct {
		name string
		// config: write --config with the partition and the missing path.
		config  bool
		env     map[string]string
		args    []string
		release bool
		wantLog string // in the log when nothing is released
	}{
		{name: "config's kubeconfig missing: --kubeconfig's", config: true,
			args: []string{"--kubeconfig", controllerKubeconfig}, release: true},
		{name: "--datastore-kubeconfig", config: true,
			args: []string{"--kubeconfig", noDatastore, "--datastore-kubeconfig", controllerKubeconfig}, release: true},
		{name: "no --datastore-kubeconfig: --kubeconfig's account is refused", config: true,
			args: []string{"--kubeconfig", noDatastore}, wantLog: "forbidden"},
		{name: "environment's kubeconfig without --config",
			env:  map[string]string{"IPKEEPER_DATASTORE": "kubernetes", "IPKEEPER_DATASTORE_KUBECONFIG": controllerKubeconfig},
			args: []string{"--kubeconfig", noDatastore}, release: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("%s-%d", base, i)
			setup := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: s.AdminKubeconfig, Prefix: prefix}
			leak := plantLeak(t, setup, base, node)
			env := map[string]string{}
			for k, v := range tc.env {
				env[k] = v
			}
			args := tc.args
			if tc.config {
				args = append(args, "--config", writeKubeConfig(t, prefix, missing))
			} else {
				env["IPKEEPER_DATASTORE_PREFIX"] = prefix
			}
			logs := startController(t, env, args...)
			released := func() bool { _, ok := handlesIn(t, setup)[leak.ID]; return !ok }
			if tc.release {
				waitUntil(t, "the leak released in partition "+prefix, func() bool {
					if strings.Contains(logs.String(), "reconcile pass failed") {
						t.Fatalf("a pass failed:\n%s", logs)
					}
					return released()
				})
				return
			}
			waitUntil(t, "a failed pass", func() bool { return strings.Contains(logs.String(), "reconcile pass failed") })
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("the failed pass does not say %q:\n%s", tc.wantLog, logs)
			}
			if released() {
				t.Error("the leak was released")
			}
		})
	}
}

// TestDatastoreKubeconfigFlagErrors: --datastore-kubeconfig with an empty
// value, or for a datastore that is not kubernetes, is refused before
// anything starts.
func TestDatastoreKubeconfigFlagErrors(t *testing.T) {
	var out bytes.Buffer
	if code := Main([]string{"--datastore-kubeconfig="}, &out, func(string) string { return "" }); code != 2 || !strings.Contains(out.String(), "--datastore-kubeconfig") {
		t.Errorf("--datastore-kubeconfig= exits %d:\n%s\nwant 2 naming the flag", code, out.String())
	}
	env := map[string]string{"IPKEEPER_DATASTORE": "local", "IPKEEPER_LOCAL_PATH": t.TempDir()}
	o := parseOptions(t, env, "--datastore-kubeconfig", "/some/kubeconfig", "--kubeconfig", "/does/not/matter")
	err := Run(context.Background(), o, &bytes.Buffer{}, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "--datastore-kubeconfig") || !strings.Contains(err.Error(), `"local"`) {
		t.Errorf("--datastore-kubeconfig on a local datastore: %v, want a refusal naming the flag and the type", err)
	}
}

// watcherKubeconfig returns a kubeconfig of a ServiceAccount bound only to
// the controller's ClusterRole (pods and nodes: the informers), without
// the datastore's.
func watcherKubeconfig(t *testing.T, s *kubetest.Server, ns string) string {
	t.Helper()
	ctx := context.Background()
	kc := s.ServiceAccountKubeconfig(t, ns, "watcher")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-watcher"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ipkeeper-controller"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "watcher", Namespace: ns}},
	}
	if _, err := s.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	return kc
}

// plantLeak allocates, in the partition of setup, an address of pod "gone"
// of namespace ns (which never exists) on node, and returns its handle.
func plantLeak(t *testing.T, setup config.Datastore, ns, node string) ipam.Handle {
	t.Helper()
	ctx := context.Background()
	st, err := datastore.Open(ctx, setup, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := allocator.New(st, nil)
	if _, err := a.EnsurePool(ctx, credsPool); err != nil {
		t.Fatal(err)
	}
	h, err := a.Allocate(ctx, allocator.Request{
		Handle: ipam.Handle{ID: ipam.HandleID("net", "gone", "eth0"), Network: "net", ContainerID: "gone", IfName: "eth0",
			Node: node, Namespace: ns, Pod: "gone"},
		Sets: [][]string{{credsPool.Name}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// handlesIn returns the handles stored in the partition of setup by ID.
func handlesIn(t *testing.T, setup config.Datastore) map[string]ipam.Handle {
	t.Helper()
	ctx := context.Background()
	st, err := datastore.Open(ctx, setup, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hs, err := allocator.New(st, nil).Handles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ipam.Handle{}
	for _, h := range hs {
		out[h.ID] = h
	}
	return out
}

// writeKubeConfig writes a CNI config whose datastore is the kubernetes
// partition prefix with kubeconfig as its (the plugin's) kubeconfig.
func writeKubeConfig(t *testing.T, prefix, kubeconfig string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "90-ipkeeper.conf")
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "net", "type": "ptp", "ipam": {"type": "ipkeeper",
  "datastore": {"type": "kubernetes", "kubeconfig": %q, "prefix": %q},
  "ranges": [[{"subnet": %q}]]}}`, kubeconfig, prefix, credsPool.CIDR.String())
	if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// parseOptions parses args as ipkeeper-controller's flags.
func parseOptions(t *testing.T, env map[string]string, args ...string) Options {
	t.Helper()
	fs := pflag.NewFlagSet("ipkeeper-controller", pflag.ContinueOnError)
	var o Options
	o.register(fs, func(k string) string { return env[k] })
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

// startController runs the controller with args (no metrics, no address
// map, no leader election, passes every 200 ms, no grace) until the test
// ends, and returns its log once it has started: Run sets klog's logger,
// which the test's own client-go calls read.
func startController(t *testing.T, env map[string]string, args ...string) *logBuffer {
	t.Helper()
	o := parseOptions(t, env, append([]string{"--metrics-addr", "", "--map-addr", "", "--leader-elect=false",
		"--leak-grace", "0s", "--resync", "200ms"}, args...)...)
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, o, logs, func(k string) string { return env[k] }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("controller: %v\n%s", err, logs)
		}
	})
	waitUntil(t, "the controller to start", func() bool {
		select {
		case err := <-errc:
			errc <- err
			t.Fatalf("the controller stopped: %v\n%s", err, logs)
		default:
		}
		return strings.Contains(logs.String(), `"msg":"starting"`)
	})
	return logs
}
