package controller

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/controller"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// Failover: two controller replicas with leader election share an etcd
// datastore holding many leaked dual-stack allocations (their pods were
// deleted with no CNI DEL) beside live pods' allocations. The leader is
// stopped in the middle of its releasing pass — killed with SIGKILL, or
// paused with SIGSTOP until the other replica has taken the Lease over and
// then resumed — and the other replica finishes the work. Afterwards every
// leaked allocation is released exactly once (by one replica's log line,
// each guarded by the handle version it observed), no live pod's address
// is touched, and `ipkeeperctl check --kubeconfig` finds nothing leaked
// and a consistent datastore.

// failoverLeaked is how many leaked allocations the leader must release:
// enough that its pass is still releasing when the test stops it.
const failoverLeaked, failoverLive = 240, 24

// failoverFlags: a grace period longer than the leader election's renew
// deadline plus retry period (3.5s), so that a replica that was paused
// cannot confirm a leak again before client-go has told it that it lost
// the Lease; no periodic resync during the test.
var failoverFlags = append([]string{"--leak-grace=5s", "--resync=10m"}, leaderFlags...)

// fleet is the state the failover tests share: an etcd datastore and
// the allocations made in it.
type fleet struct {
	t      *testing.T
	c      *cluster
	ep     string
	prefix string
	a      *allocator.Allocator
	// leaked and live hold the allocations by handle ID.
	leaked, live map[string]ipam.Handle
}

// env is the controllers' and ipkeeperctl's datastore environment.
func (f *fleet) env() []string {
	return []string{"IPKEEPER_DATASTORE=etcd", "IPKEEPER_ETCD_ENDPOINTS=" + f.ep, "IPKEEPER_ETCD_PREFIX=" + f.prefix}
}

// newFleet makes failoverLive running pods on three nodes and
// failoverLeaked pods each on a node of its own, each with a dual-stack
// allocation written through the allocator as the plugin's ADD would (pod
// namespace, name and UID recorded), then deletes the leaked pods with
// grace period 0 and no DEL. A node's leaks are released in one write of
// its object: one leak per node makes each release a write of its own,
// so that a pass is still releasing when the test stops its leader, and
// the writes under way when it stopped are the releases under way.
func newFleet(t *testing.T, c *cluster) *fleet {
	t.Helper()
	e := etcdtest.ForTest(t, nil)
	f := &fleet{t: t, c: c, ep: e.Endpoint, prefix: "/" + c.ns, leaked: map[string]ipam.Handle{}, live: map[string]ipam.Handle{}}
	st, err := datastore.Open(ctxT(t), config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{f.ep}, Prefix: f.prefix}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f.a = allocator.New(st, nil)
	nodes := []string{c.node("a"), c.node("b"), c.node("c")}
	pools := []ipam.Pool{
		{Name: "fo4", CIDR: netip.MustParsePrefix("10.73.0.0/16"), BlockSize: 26, Origin: "config"},
		{Name: "fo6", CIDR: netip.MustParsePrefix("fd73::/104"), BlockSize: 122, Origin: "config"},
	}
	type job struct {
		name, node string
		live       bool
	}
	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				h, err := f.allocatePod(j.name, j.node, pools)
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				mu.Lock()
				if j.live {
					f.live[h.ID] = h
				} else {
					f.leaked[h.ID] = h
				}
				mu.Unlock()
			}
		})
	}
	for i := range failoverLive + failoverLeaked {
		if i < failoverLive {
			jobs <- job{fmt.Sprintf("live-%03d", i), nodes[i%len(nodes)], true}
		} else {
			jobs <- job{fmt.Sprintf("gone-%03d", i), c.node(fmt.Sprintf("g%03d", i)), false}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Pods with no allocation, deleted to make the leader run a pass.
	for i := range 4 {
		c.pod(fmt.Sprintf("marker-%d", i), nodes[0])
	}
	// The leaked pods die with no CNI DEL.
	names := make(chan string)
	for range 8 {
		wg.Go(func() {
			for name := range names {
				c.deletePod(name)
			}
		})
	}
	for _, h := range f.leaked {
		names <- h.Pod
	}
	close(names)
	wg.Wait()
	return f
}

// allocatePod creates a running pod and allocates its addresses.
func (f *fleet) allocatePod(name, node string, pools []ipam.Pool) (ipam.Handle, error) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.c.ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := f.c.client.CoreV1().Pods(f.c.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return ipam.Handle{}, fmt.Errorf("create pod %s: %w", name, err)
	}
	cid := "sandbox-" + name
	return f.a.Allocate(ctx, allocator.Request{
		Handle: ipam.Handle{ID: ipam.HandleID("failover", cid, "eth0"), Network: "failover", ContainerID: cid, IfName: "eth0",
			Node: node, Namespace: f.c.ns, Pod: name, PodUID: string(p.UID)},
		Sets:   [][]string{{"fo4"}, {"fo6"}},
		Define: pools,
	})
}

// releaseLines counts p's log lines releasing h's addresses.
func releaseLines(p *proc, h ipam.Handle) int {
	return p.logCount("released leaked address", `"pod":"`+h.Namespace+"/"+h.Pod+`"`, `"uid":"`+h.PodUID+`"`,
		`"address":"`+joinAddrs(addrsOf(h))+`"`, `"reason":"pod-gone"`)
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// verify checks the end state: no leaked handle left and each of its
// addresses free in its block, every live handle and address as it was,
// each leaked allocation released by exactly one release log line of
// one replica (except at most unlogged ones that a replica killed with
// SIGKILL committed but did not live to log: no other replica logged
// them, and one write guarded by the observed record released each), and
// ipkeeperctl check --kubeconfig clean.
func (f *fleet) verify(ps []*proc, unlogged int) {
	t := f.t
	t.Helper()
	ctx := ctxT(t)
	hs, err := f.a.Handles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := map[string]ipam.Handle{}
	for _, h := range hs {
		now[h.ID] = h
	}
	for id, h := range f.live {
		if got, ok := now[id]; !ok || !sameAddrs(got, h) || got.PodUID != h.PodUID {
			t.Errorf("live pod %s lost its allocation %v: now %+v", h.Pod, addrsOf(h), got)
		}
	}
	for id := range now {
		if _, ok := f.live[id]; !ok {
			t.Errorf("handle %s is left: %+v", id, now[id])
		}
	}
	holder := map[netip.Addr]string{}
	for _, pool := range []string{"fo4", "fo6"} {
		bs, err := f.a.Blocks(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			for _, al := range b.Allocations() {
				holder[al.Addr] = al.Handle
			}
		}
	}
	for _, h := range f.live {
		for _, a := range addrsOf(h) {
			if holder[a] != h.ID {
				t.Errorf("live pod %s's address %v is held by %q in its block", h.Pod, a, holder[a])
			}
		}
	}
	var missing []string
	for _, h := range f.leaked {
		for _, a := range addrsOf(h) {
			if owner, ok := holder[a]; ok {
				t.Errorf("leaked address %v of %s is still held by %q", a, h.Pod, owner)
			}
		}
		n := 0
		for _, p := range ps {
			n += releaseLines(p, h)
		}
		switch {
		case n == 0:
			missing = append(missing, h.Pod)
		case n > 1:
			t.Errorf("%s (%v) released %d times", h.Pod, addrsOf(h), n)
		}
	}
	if len(missing) > unlogged {
		t.Errorf("no release log line for %d leaked allocations: %v", len(missing), missing)
	}
	out, errOut, code := f.ctl("check", "--kubeconfig", srv.AdminKubeconfig)
	if code != 0 || !strings.Contains(out, "no leaked addresses") {
		t.Errorf("ipkeeperctl check --kubeconfig: exit %d\n%s%s", code, out, errOut)
	}
}

func sameAddrs(x, y ipam.Handle) bool {
	ax, ay := addrsOf(x), addrsOf(y)
	if len(ax) != len(ay) {
		return false
	}
	for i := range ax {
		if ax[i] != ay[i] {
			return false
		}
	}
	return true
}

// ctl runs ipkeeperctl on the fleet's datastore.
func (f *fleet) ctl(args ...string) (string, string, int) {
	f.t.Helper()
	cmd := exec.CommandContext(ctxT(f.t), ctlBin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "NODENAME=ctl-node"}, f.env()...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		f.t.Fatalf("ipkeeperctl %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// waitReleased waits until the datastore holds only the live pods'
// handles.
func (f *fleet) waitReleased(limit time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		hs, err := f.a.Handles(ctxT(f.t))
		if err != nil {
			f.t.Fatal(err)
		}
		if len(hs) <= len(f.live) {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d handles left after %v, want the %d live ones", len(hs), limit, len(f.live))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// settle makes the leader p run one more pass (a marker pod is deleted)
// and waits for it to end, so that the pass that released the last leak
// has ended too; then it waits until every release p counted in its
// metrics has been read from its log.
func (f *fleet) settle(p *proc, marker int) {
	f.t.Helper()
	before := p.metric("ipkeeper_reconcile_duration_seconds_count")
	f.c.deletePod(fmt.Sprintf("marker-%d", marker))
	p.waitMetric(time.Minute, "ipkeeper_reconcile_duration_seconds_count", func(v float64) bool { return v > before })
	logged(p)
}

// logged waits until p's log holds a line for every pod-gone release its
// metrics count, and returns that number.
func logged(p *proc) int {
	p.t.Helper()
	n := int(p.metric(`ipkeeper_releases_total{reason="pod-gone"}`))
	p.waitLog(time.Minute, n, "released leaked address", `"reason":"pod-gone"`)
	return n
}

// released is how many pod-gone releases p has logged.
func released(p *proc) int { return p.logCount("released leaked address", `"reason":"pod-gone"`) }

// startPair starts two replicas and returns the leader, then the other.
func startPair(t *testing.T, f *fleet) (leader, other *proc) {
	t.Helper()
	p1 := startController(t, "controller-1", f.env(), failoverFlags...)
	p2 := startController(t, "controller-2", f.env(), failoverFlags...)
	leader = leaderOf(t, time.Minute, p1, p2)
	if leader == p1 {
		return p1, p2
	}
	return p2, p1
}

// TestFailoverKill9: the leader is killed with SIGKILL in the middle of
// its releasing pass; the other replica takes the Lease over after it
// expires and releases the rest, one grace period after its own first
// observation.
func TestFailoverKill9(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	f := newFleet(t, c)
	leader, other := startPair(t, f)

	leader.waitLog(2*time.Minute, 1, "released leaked address")
	leader.kill9() // every line it wrote has been read
	k := released(leader)
	if k == 0 || k >= failoverLeaked {
		t.Fatalf("the leader was not killed mid-pass: it logged %d of %d releases", k, failoverLeaked)
	}
	t.Logf("killed the leader after %d of %d releases", k, failoverLeaked)

	if leaderOf(t, time.Minute, other) != other {
		t.Fatal("unreachable")
	}
	// The other replica releases everything that is left.
	f.waitReleased(2 * time.Minute)
	f.settle(other, 0)
	if n := other.metric(`ipkeeper_release_skips_total{why="error"}`); n != 0 {
		t.Errorf("%v releases failed", n)
	}
	// Each of the killed leader's release workers may have committed one
	// release it did not live to log.
	f.verify([]*proc{leader, other}, controller.ReleaseWorkers)
}

// TestFailoverPausedLeader: the leader is paused with SIGSTOP in the
// middle of its releasing pass, the other replica takes the Lease over,
// and the old leader is resumed at once, before the new leader's grace
// period has ended. The old leader must start no release after it lost
// the Lease: it logs none after its resume except those whose
// transactions were under way when it was stopped (at most
// controller.ReleaseWorkers, each guarded by the observed handle version,
// so none can free what the new leader freed).
// The new leader releases the rest; nothing is released twice.
func TestFailoverPausedLeader(t *testing.T) {
	s := setup(t)
	c := newCluster(t, s)
	f := newFleet(t, c)
	old, next := startPair(t, f)

	old.waitLog(2*time.Minute, 1, "released leaked address")
	old.sigstop()
	stepDowns := old.logCount("not leading")
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			old.sigcont() // so that stop can end it
		}
	})
	if leaderOf(t, time.Minute, next) != next {
		t.Fatal("unreachable")
	}
	// The new leader holds the Lease; the old one's lines up to its stop
	// have long been read.
	before := released(old)
	if before == 0 || before >= failoverLeaked {
		t.Fatalf("the leader was not paused mid-pass: it logged %d of %d releases", before, failoverLeaked)
	}
	t.Logf("paused the leader after %d of %d releases", before, failoverLeaked)
	resumedAt := old.lineCount()
	old.sigcont()
	resumed = true

	// The old leader notices it lost the Lease.
	old.waitLog(time.Minute, stepDowns+1, "not leading")
	f.waitReleased(2 * time.Minute)
	// Whoever leads now (the old leader may win the Lease back in a new
	// term, whose releases wait a grace period of their own) runs a pass.
	f.settle(leaderOf(t, time.Minute, old, next), 0)
	logged(old)
	logged(next)
	// The old term's releases: those logged after the resume and before
	// the old leader's next term, if any, began.
	after := 0
	for _, l := range old.linesSince(resumedAt) {
		if strings.Contains(l, "leading: reconciling") {
			break
		}
		if strings.Contains(l, "released leaked address") {
			after++
		}
	}
	t.Logf("the old leader logged %d releases after its resume in its old term, %d in all; the new leader %d",
		after, released(old)-before, released(next))
	if after > controller.ReleaseWorkers {
		t.Errorf("the old leader released %d allocations after it lost the Lease", after)
	}
	for _, p := range []*proc{old, next} {
		if n := p.metric(`ipkeeper_release_skips_total{why="error"}`); n != 0 {
			t.Errorf("%s: %v releases failed", p.name, n)
		}
	}
	f.verify([]*proc{old, next}, 0)
}
