package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// shipped lists every object deploy/ holds, as "Kind namespace/name"
// (cluster-scoped: "Kind name"). An object added to or dropped from
// deploy/ must show here too.
var shipped = []string{
	"ClusterRole ipkeeper-controller",
	"ClusterRole ipkeeper-datastore",
	"ClusterRole ipkeeper-node",
	"ClusterRoleBinding ipkeeper-controller",
	"ClusterRoleBinding ipkeeper-datastore",
	"ClusterRoleBinding ipkeeper-node",
	"ConfigMap kube-system/ipkeeper-config",
	"CustomResourceDefinition ipamblocks.ipkeeper.io",
	"CustomResourceDefinition ipamnodes.ipkeeper.io",
	"CustomResourceDefinition ipampools.ipkeeper.io",
	"CustomResourceDefinition ipamreservations.ipkeeper.io",
	"DaemonSet kube-system/ipkeeper-node",
	"Deployment kube-system/ipkeeper-controller",
	"PodDisruptionBudget kube-system/ipkeeper-controller",
	"Role kube-system/ipkeeper-controller-leader-election",
	"RoleBinding kube-system/ipkeeper-controller-leader-election",
	"ServiceAccount kube-system/ipkeeper-controller",
	"ServiceAccount kube-system/ipkeeper-node",
	"ValidatingAdmissionPolicy ipkeeper-node-writes",
	"ValidatingAdmissionPolicyBinding ipkeeper-node-writes",
}

func objectKey(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func keys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, objectKey(o))
	}
	sort.Strings(out)
	return out
}

func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kubetest.Manifests(deployDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestManifestsAreTheShippedSet: deploy/ holds exactly the objects listed.
func TestManifestsAreTheShippedSet(t *testing.T) {
	if got := keys(manifests(t)); !slices.Equal(got, shipped) {
		t.Fatalf("deploy/ objects:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(shipped, "\n  "))
	}
}

// TestManifestsServerDryRun: the API server validates and admits every
// object of deploy/ (server-side dry run: defaulting, validation and
// admission run, nothing is stored).
func TestManifestsServerDryRun(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, o := range manifests(t) {
		if err := s.Apply(ctx, true, o); err != nil {
			t.Errorf("server-side dry run of %s: %v", objectKey(o), err)
		}
	}
	// A dry run stored nothing of the kinds Start does not apply.
	if _, err := s.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "ipkeeper-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet after a dry run: err = %v, want NotFound", err)
	}
}

// TestManifestsDryRunRejectsBadObject shows the dry run above can fail: a
// DaemonSet whose selector does not match its template is refused.
func TestManifestsDryRunRejectsBadObject(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, o := range manifests(t) {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		bad := o.DeepCopy()
		if err := unstructured.SetNestedField(bad.Object, "other", "spec", "selector", "matchLabels", "app.kubernetes.io/component"); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, true, bad); err == nil || !strings.Contains(err.Error(), "selector") {
			t.Fatalf("dry run of a DaemonSet with a mismatched selector: %v, want a selector error", err)
		}
		return
	}
	t.Fatal("no DaemonSet in deploy/")
}

// TestKustomizationRendersTheSameObjects: `kubectl kustomize deploy/`
// (what apply -k applies) yields exactly the objects apply -f reads.
func TestKustomizationRendersTheSameObjects(t *testing.T) {
	k := kubectl(t)
	out, err := exec.Command(k, "kustomize", deployDir(t)).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	f := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	rendered, err := kubetest.ManifestFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(rendered); !slices.Equal(got, shipped) {
		t.Fatalf("kubectl kustomize deploy/ renders:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(shipped, "\n  "))
	}
}

// TestKubectlApply: on an API server with none of ipkeeper's objects,
// `kubectl apply -f deploy/` creates them all; applying again (-k, an
// upgrade in place) succeeds; `kubectl delete -k deploy/` removes them all;
// `kubectl apply -k deploy/` creates them again.
func TestKubectlApply(t *testing.T) {
	k := kubectl(t)
	s := kubetest.Start(t)
	// Four kubectl runs against a fresh API server, with CRDs to establish
	// and remove: minutes when the whole suite loads the machine.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dyn, mapper := dynamicClient(t, s)
	resource := func(o *unstructured.Unstructured) dynamic.ResourceInterface {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		if o.GetNamespace() != "" {
			return dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		return dyn.Resource(m.Resource)
	}
	objs := manifests(t)
	present := func() (have, missing []string) {
		for _, o := range objs {
			_, err := resource(o).Get(ctx, o.GetName(), metav1.GetOptions{})
			switch {
			case err == nil:
				have = append(have, objectKey(o))
			case apierrors.IsNotFound(err):
				missing = append(missing, objectKey(o))
			default:
				t.Fatalf("get %s: %v", objectKey(o), err)
			}
		}
		return have, missing
	}
	// Start applied deploy/'s RBAC; remove it so kubectl starts from nothing.
	for _, o := range objs {
		if err := resource(o).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete %s: %v", objectKey(o), err)
		}
	}
	waitFor := func(what string, cond func() (bool, string)) {
		t.Helper()
		for {
			ok, detail := cond()
			if ok {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %s", what, detail)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	allGone := func() (bool, string) {
		have, _ := present()
		return len(have) == 0, fmt.Sprintf("still there: %v", have)
	}
	allThere := func() (bool, string) {
		_, missing := present()
		return len(missing) == 0, fmt.Sprintf("missing: %v", missing)
	}
	waitFor("objects deleted before the test", allGone)

	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, k, append([]string{"--kubeconfig", s.AdminKubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
	dir := deployDir(t)
	run("apply", "-f", dir)
	waitFor("after kubectl apply -f", allThere)
	run("apply", "-k", dir)
	waitFor("after a second apply (-k)", allThere)
	// kubectl's own wait would end in a bare kill at the deadline; the
	// poll below names what is still there.
	run("delete", "-k", dir, "--wait=false")
	waitFor("after kubectl delete -k", allGone)
	run("apply", "-k", dir)
	waitFor("after kubectl apply -k", allThere)
}

// dynamicClient returns a dynamic client and a REST mapper for s's admin.
func dynamicClient(t *testing.T, s *kubetest.Server) (*dynamic.DynamicClient, *restmapper.DeferredDiscoveryRESTMapper) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
}
