package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// whereaboutsModule is the Go module whereabouts is built from.
const whereaboutsModule = "github.com/k8snetworkplumbingwg/whereabouts"

// whereaboutsCRDs are the files of the module's doc/crds/ that define its
// kinds (the directory also holds a DaemonSet and the node-slice
// controller's Deployment, which the plugin does not need).
var whereaboutsCRDs = []string{
	"whereabouts.cni.cncf.io_ippools.yaml",
	"whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml",
	"whereabouts.cni.cncf.io_nodeslicepools.yaml",
}

// ipPools is whereabouts' IPPool resource: one object per range, holding
// every allocation of the range.
var ipPools = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "ippools"}

// whereaboutsNamespace is where the plugin keeps its IPPools and its
// leader-election Lease: the kubeconfig context's namespace, kube-system
// when it names none (the admin kubeconfig names none).
const whereaboutsNamespace = "kube-system"

// cacheDir is the directory scripts/kube-apiserver.sh caches builds in:
// $IPKEEPER_CACHE, else $XDG_CACHE_HOME/ipkeeper, else ~/.cache/ipkeeper.
func cacheDir() (string, error) {
	if d := os.Getenv("IPKEEPER_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "ipkeeper"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "ipkeeper"), nil
}

// goEnv is the environment for the go command fetching whereabouts. The
// checksum database does not list every whereabouts version (v0.9.2: 404),
// so the module itself is exempt from it; its dependencies are checked
// against its own go.sum when it is built.
func goEnv() []string {
	return append(os.Environ(), "GONOSUMDB="+whereaboutsModule, "GOWORK=off")
}

// whereaboutsSource downloads the module at version into the module cache
// (through the module proxy) and returns its directory.
func whereaboutsSource(ctx context.Context, version string) (string, error) {
	tmp, err := os.MkdirTemp("", "whereabouts-dl-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", whereaboutsModule+"@"+version)
	cmd.Dir = tmp // outside any module
	cmd.Env = goEnv()
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %v %s %s", whereaboutsModule, version, err, info.Error, out)
	}
	return info.Dir, nil
}

// whereaboutsBinary returns the whereabouts plugin of version, building it
// from its module's cmd/ package into the cache (keyed by version) the
// first time. `go install module/cmd@version` cannot be used: it asks the
// proxy for the module's version list (for deprecations), which the proxy
// refuses for whereabouts, so the build runs in the module's own directory
// with its own go.mod and go.sum.
func whereaboutsBinary(ctx context.Context, src, version string) (string, error) {
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "whereabouts-"+version, "whereabouts")
	if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	fmt.Printf("building whereabouts %s from %s into %s\n", version, src, out)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out+".tmp", "./cmd")
	cmd.Dir = src
	cmd.Env = goEnv()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s@%s/cmd: %v\n%s", whereaboutsModule, version, err, b)
	}
	return out, os.Rename(out+".tmp", out)
}

// applyWhereaboutsCRDs applies the module's CRDs to the API server as the
// admin and waits until they are established.
func applyWhereaboutsCRDs(ctx context.Context, srv *kubetest.Server, src string) error {
	for _, f := range whereaboutsCRDs {
		objs, err := kubetest.ManifestFile(filepath.Join(src, "doc", "crds", f))
		if err != nil {
			return err
		}
		if err := srv.Apply(ctx, false, objs...); err != nil {
			return fmt.Errorf("apply %s: %w", f, err)
		}
	}
	return nil
}

// whereaboutsMode is whereabouts v0.9.x on the same API server, with the
// admin kubeconfig (whereabouts ships no narrower role that works without
// its own installer). Each cell has a /16 of its own, so a cell's IPPool
// starts empty; after the cell its IPPool object is deleted.
func whereaboutsMode(bin, tmp string, srv *kubetest.Server) (*mode, error) {
	flat := filepath.Join(tmp, "whereabouts.conf")
	b, err := json.Marshal(map[string]any{"kubernetes": map[string]any{"kubeconfig": srv.AdminKubeconfig}})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(flat, b, 0o600); err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(srv.Config)
	if err != nil {
		return nil, err
	}
	rangeOf := func(cell int) string { return fmt.Sprintf("10.%d.0.0/16", 128+cell) }
	return &mode{
		name:  "whereabouts",
		about: "on the same kube-apiserver with the ADMIN kubeconfig (system:masters), its CRDs from the module's doc/crds/",
		prepare: func(_ context.Context, cell int) (callFunc, error) {
			conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "wa-bench", "type": "macvlan",
				"ipam": map[string]any{"type": "whereabouts", "range": rangeOf(cell), "configuration_path": flat}})
			if err != nil {
				return nil, err
			}
			return func(node int, id string) cnirun.Call {
				return cnirun.Call{ContainerID: id, NetNS: "/var/run/netns/" + id, IfName: "eth0", Args: podArgs(id),
					Stdin: conf, Env: []string{"NODENAME=" + nodeName(node)}}
			}, nil
		},
		cleanup: func(ctx context.Context, cell int) error {
			// The pool's name is its range with ':' and '/' as '-' (no
			// network_name set).
			name := strings.NewReplacer(":", "-", "/", "-").Replace(rangeOf(cell))
			err := dyn.Resource(ipPools).Namespace(whereaboutsNamespace).Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil // no ADD got as far as creating it
			}
			return err
		},
		bin: bin,
	}, nil
}
