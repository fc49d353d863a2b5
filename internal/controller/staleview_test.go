package controller

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
)

// TestPassBeforeSync: a pass before the informers have listed pods and
// nodes fails with ErrNotSynced and changes nothing, however often it runs
// and however much time passes — in its empty caches a live pod's
// allocation would look leaked. Once synced, the same controller keeps it.
func TestPassBeforeSync(t *testing.T) {
	const grace = time.Minute
	r := newRig(t, grace)
	ctx := context.Background()
	pool := passFamilies[0].pool
	r.alloc(func(a *allocator.Allocator) {
		if _, err := a.EnsurePool(ctx, pool); err != nil {
			t.Fatal(err)
		}
	})
	node := r.node("a")
	uid := r.pod("live", node, corev1.PodRunning)
	r.attach(pool, "live", "live", uid, node, t0)
	before := r.storeState()

	// The rig's configuration and clock, informers not started.
	c, err := New(r.c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	var errs []error
	for i := range 3 {
		r.clock.Set(t0.Add(time.Duration(i) * 2 * grace))
		_, err := c.Pass(ctx)
		errs = append(errs, err)
	}
	if after := r.storeState(); !maps.Equal(after, before) {
		t.Fatalf("passes before the informers synced changed the store:\n%v\n->\n%v", before, after)
	}
	for i, err := range errs {
		if !errors.Is(err, ErrNotSynced) {
			t.Errorf("pass %d before the informers synced: %v, want ErrNotSynced", i, err)
		}
	}

	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.Sync(sctx) {
		t.Fatal("informers did not sync")
	}
	for i := range 2 {
		r.clock.Set(t0.Add(time.Duration(6+i) * grace))
		if _, err := c.Pass(ctx); err != nil {
			t.Fatalf("pass %d after the sync: %v", i, err)
		}
	}
	if _, ok := r.handles()["live"]; !ok {
		t.Fatal("the live pod's allocation was released")
	}
}

// TestPassReleasesNothingWhenListsFail: while the API server refuses to
// list pods, or nodes, to the controller (its RBAC binding for them
// removed), and the watches it started before go on without an error, a
// pass confirms a leak but releases nothing: the next watch could not
// start, so the caches are not known to stay current. Once the lists
// work again the leak is released.
func TestPassReleasesNothingWhenListsFail(t *testing.T) {
	for _, resource := range []string{"pods", "nodes"} {
		t.Run(resource, func(t *testing.T) {
			const grace = time.Minute
			r := newRig(t, grace)
			ctx := context.Background()
			grants := map[string]*rbacv1.ClusterRoleBinding{}
			client := r.controllerWithGrants(grants)
			pool := passFamilies[0].pool
			r.alloc(func(a *allocator.Allocator) {
				if _, err := a.EnsurePool(ctx, pool); err != nil {
					t.Fatal(err)
				}
			})
			node := r.node("a")
			liveUID := r.pod("live", node, corev1.PodRunning)
			r.attach(pool, "live", "live", liveUID, node, t0)
			goneUID := r.pod("gone", node, corev1.PodRunning)
			r.attach(pool, "gone", "gone", goneUID, node, t0)
			r.deletePod("gone")
			r.pass(t0) // the leak's first observation

			// Take the list of resource away; wait until the API server
			// refuses it (its RBAC cache follows the deletion).
			b := grants[resource]
			if err := r.admin.RbacV1().ClusterRoleBindings().Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			r.waitCache(func() bool { return apierrors.IsForbidden(list(ctx, client, resource)) }, "the API server to refuse listing "+resource)
			before := r.storeState()
			r.pass(t0.Add(grace))
			if r.c.view.watchErrorSince(time.Time{}) {
				t.Fatal("setup: a watch failed; this test is about lists failing while the watches run")
			}
			if after := r.storeState(); !maps.Equal(after, before) {
				t.Fatalf("a pass while the API server refuses to list %s changed the store:\n%v\n->\n%v", resource, before, after)
			}
			if _, ok := r.handles()["gone"]; !ok {
				t.Fatalf("the leak was released while the API server refused to list %s", resource)
			}

			// Listing works again: the confirmed leak goes, the live stays.
			b.ResourceVersion = ""
			if _, err := r.admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			r.waitCache(func() bool { return list(ctx, client, resource) == nil }, "the API server to list "+resource+" again")
			r.pass(t0.Add(grace + time.Second))
			hs := r.handles()
			if _, ok := hs["gone"]; ok {
				t.Fatal("the confirmed leak was not released once the lists worked again")
			}
			if _, ok := hs["live"]; !ok {
				t.Fatal("the live pod's allocation was released")
			}
		})
	}
}

// list lists at most one of resource ("pods" or "nodes") with client.
func list(ctx context.Context, client kubernetes.Interface, resource string) error {
	var err error
	if resource == "pods" {
		_, err = client.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
	} else {
		_, err = client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	}
	return err
}

// controllerWithGrants replaces r's controller with one (synced, same
// configuration and clock) that authenticates as a ServiceAccount of the
// test whose lists and watches of pods and of nodes come from two
// ClusterRoleBindings of its own, returned in grants by resource so that
// the test can take one away. It returns that account's client.
func (r *rig) controllerWithGrants(grants map[string]*rbacv1.ClusterRoleBinding) kubernetes.Interface {
	t := r.t
	t.Helper()
	ctx := context.Background()
	kubeconfig := srv.ServiceAccountKubeconfig(t, r.ns, "lister")
	for _, resource := range []string{"pods", "nodes"} {
		name := r.ns + "-list-" + resource
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: []string{"list", "watch"}}}}
		if _, err := r.admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "lister", Namespace: r.ns}}}
		b, err := r.admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		grants[resource] = b
		t.Cleanup(func() {
			_ = r.admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = r.admin.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.waitCache(func() bool { return list(ctx, client, "pods") == nil && list(ctx, client, "nodes") == nil }, "the grants to take effect")
	ccfg := r.c.cfg
	ccfg.Client = client
	c, err := New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.Sync(sctx) {
		t.Fatal("informers did not sync")
	}
	r.c = c
	return client
}
