package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// countingListener accepts TCP connections on loopback and counts them
// (and closes them): the API server a planted kubeconfig would send the
// plugin to.
func countingListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String(), accepted
}

// untrustedPlacements put a kubeconfig where another user could have
// written it; each returns the path to name in the config and the path
// the error must name. Root-only ones change owners.
var untrustedPlacements = []struct {
	name string
	root bool
	put  func(t *testing.T, base string, data []byte) (path, names string)
}{
	{"mode 0666", false, func(t *testing.T, base string, data []byte) (string, string) {
		p := filepath.Join(base, "kubeconfig")
		mustDo(t, os.WriteFile(p, data, 0o600), os.Chmod(p, 0o666))
		return p, p
	}},
	{"symbolic link into another user's directory", true, func(t *testing.T, base string, data []byte) (string, string) {
		theirs := filepath.Join(base, "home-nobody")
		f := filepath.Join(theirs, "kubeconfig")
		mustDo(t, os.Mkdir(theirs, 0o755), os.WriteFile(f, data, 0o600),
			os.Chown(f, 65534, 65534), os.Chown(theirs, 65534, 65534))
		link := filepath.Join(base, "kubeconfig")
		mustDo(t, os.Symlink(f, link))
		return link, theirs
	}},
}

func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// privateTempDir is t.TempDir made 0700 with its parent.
func privateTempDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	mustDo(t, os.Chmod(filepath.Dir(d), 0o700), os.Chmod(d, 0o700))
	return d
}

// The plugin binary refuses a pod-aware config whose
// ipam.kubernetes.kubeconfig another user could have written: ADD fails
// with 7 naming the file and the rule, connects to nothing (not to the
// server the kubeconfig names) and allocates nothing.
func TestUntrustedPodAwareKubeconfig(t *testing.T) {
	needIpkeeper(t)
	for _, pl := range untrustedPlacements {
		t.Run(pl.name, func(t *testing.T) {
			if pl.root {
				testenv.NeedRoot(t)
			}
			addr, accepted := countingListener(t)
			base := privateTempDir(t)
			kc, names := pl.put(t, base, []byte("apiVersion: v1\nkind: Config\ncurrent-context: x\n"+
				"clusters: [{name: c, cluster: {server: 'https://"+addr+"', insecure-skip-tls-verify: true}}]\n"+
				"users: [{name: u, user: {token: planted}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"))
			storeDir := filepath.Join(base, "store")
			conf := mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "podnet", "type": "bridge",
				"ipam": map[string]any{"type": "ipkeeper", "nodeName": "node-a",
					"datastore":  map[string]any{"type": "local", "path": storeDir},
					"kubernetes": map[string]any{"kubeconfig": kc},
					"ranges":     []any{[]any{map[string]any{"subnet": "10.96.0.0/24"}}}}})
			call := directCall("ADD", "c1", conf)
			call.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=u1"
			out, err := cnirun.Run(ctxT(t), ipkeeperBin, call)
			if err != nil {
				t.Fatal(err)
			}
			e := wantCNIError(t, "ADD with an untrusted kubeconfig", out, types.ErrInvalidNetworkConfig)
			if msg := e.Msg + " " + e.Details; !strings.Contains(msg, names) || !strings.Contains(msg, "kubeconfig "+kc) {
				t.Fatalf("error %v does not name %s and %s", e, kc, names)
			}
			t.Log(e)
			if n := accepted.Load(); n != 0 {
				t.Fatalf("the plugin connected %d times to the server of the untrusted kubeconfig", n)
			}
			ds := config.Datastore{Type: config.DatastoreLocal, Path: storeDir}
			if got := kubeHandles(t, ds); len(got) != 0 {
				t.Fatalf("handles after the refused ADD: %v", got)
			}
		})
	}
}

// The plugin (through ipkeeper-kube) refuses a kubernetes datastore whose
// kubeconfig another user could have written, on a real API server with
// deploy/'s RBAC: ADD fails with 7 naming the file and the rule and
// nothing is allocated; the same kubeconfig made safe works.
func TestUntrustedDatastoreKubeconfig(t *testing.T) {
	needIpkeeper(t)
	needKubeSibling(t)
	srv := kubetest.Start(t)
	good := srv.NodeKubeconfig(t, "node-a")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for i, pl := range untrustedPlacements {
		t.Run(pl.name, func(t *testing.T) {
			if pl.root {
				testenv.NeedRoot(t)
			}
			prefix := []string{"trust-mode", "trust-link"}[i]
			kc, names := pl.put(t, privateTempDir(t), data)
			conf := mustJSON(t, map[string]any{"cniVersion": "1.1.0", "name": "kube", "type": "bridge",
				"ipam": map[string]any{"type": "ipkeeper", "nodeName": "node-a",
					"datastore": map[string]any{"type": "kubernetes", "kubeconfig": kc, "prefix": prefix},
					"ranges":    []any{[]any{map[string]any{"subnet": "10.71.0.0/24"}}}}})
			e := wantCNIError(t, "ADD with an untrusted datastore kubeconfig", ipamRun(t, "ADD", "c1", conf), types.ErrInvalidNetworkConfig)
			if msg := e.Msg + " " + e.Details; !strings.Contains(msg, names) || !strings.Contains(msg, "kubeconfig "+kc) {
				t.Fatalf("error %v does not name %s and %s", e, kc, names)
			}
			t.Log(e)
			ds := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: good, Prefix: prefix,
				DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
			if got := kubeHandles(t, ds); len(got) != 0 {
				t.Fatalf("handles after the refused ADD: %v", got)
			}
			safe := bytesReplace(conf, kc, good)
			ipamAdd(t, "c1", safe)
			if out := ipamRun(t, "DEL", "c1", safe); out.ExitCode != 0 {
				t.Fatalf("DEL:\n%v", out)
			}
		})
	}
}

func bytesReplace(b []byte, old, new string) []byte {
	return []byte(strings.ReplaceAll(string(b), old, new))
}
