package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/kubetest"
	"github.com/ipkeeper/ipkeeper/internal/webui"
)

// TestMapLeaks checks the address map's leak source against the real API
// server over a real map of the store: an allocation whose pod never
// existed is a candidate, a live pod's is not; deleting a pod asks for a
// scan (through the informer's event), which then finds its allocation,
// first seen then, while the other keeps when it was first seen.
func TestMapLeaks(t *testing.T) {
	for _, f := range passFamilies {
		t.Run(f.name, func(t *testing.T) {
			r := newRig(t, time.Hour)
			ctx := context.Background()
			r.alloc(func(a *allocator.Allocator) {
				if _, err := a.EnsurePool(ctx, f.pool); err != nil {
					t.Fatal(err)
				}
			})
			node := r.node("a")
			live := r.attach(f.pool, "live", "live", "", node, t0)
			r.pod("live", node, corev1.PodRunning, live.IPs[0].Addr)
			doomed := r.attach(f.pool, "doomed", "doomed", "", node, t0)
			r.pod("doomed", node, corev1.PodRunning, doomed.IPs[0].Addr)
			gone := r.attach(f.pool, "gone", "gone", "", node, t0)

			u, err := webui.New(webui.Options{Datastore: config.Datastore{Type: config.DatastoreLocal, Path: r.dir}, Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			uctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() { _ = u.Run(uctx) })
			defer func() { cancel(); wg.Wait() }()
			waitUntil(t, "the map to read the store", func() bool { hs, _, ok := u.Handles(); return ok && len(hs) == 3 })

			ml, err := r.c.NewMapLeaks()
			if err != nil {
				t.Fatal(err)
			}
			// The informer replays the pods there are to the new handlers:
			// let it finish, and forget the scan that asked for.
			waitUntil(t, "the handlers to sync", ml.handlersSynced)
			select {
			case <-ml.trigger:
			default:
				t.Fatal("the pods the informer holds asked for no scan")
			}
			scan := func() string {
				t.Helper()
				if _, ok := ml.Scan(u); !ok {
					t.Fatal("Scan: the map has not read the store")
				}
				var b strings.Builder
				for _, l := range ml.LeakCandidates() {
					fmt.Fprintf(&b, "%s %s %s %s %s\n", l.Addr, l.Handle, l.Pod, l.Reason, l.Since.Format(time.RFC3339))
				}
				return b.String()
			}
			want := func(at map[string]time.Time, hs ...ipam.Handle) string {
				var b strings.Builder
				for _, h := range hs {
					fmt.Fprintf(&b, "%s %s %s/%s pod-gone: pod %s/%s (UID not recorded) no longer exists %s\n",
						h.IPs[0].Addr, h.ID, r.ns, h.Pod, r.ns, h.Pod, at[h.Pod].Format(time.RFC3339))
				}
				return b.String()
			}
			if g, w := scan(), want(map[string]time.Time{"gone": t0}, gone); g != w {
				t.Fatalf("candidates:\n%swant:\n%s", g, w)
			}
			r.deletePod("doomed")
			select {
			case <-ml.trigger:
			case <-time.After(30 * time.Second):
				t.Fatal("deleting a pod asked for no scan")
			}
			r.clock.Set(t0.Add(time.Minute))
			if g, w := scan(), want(map[string]time.Time{"doomed": t0.Add(time.Minute), "gone": t0}, doomed, gone); g != w {
				t.Fatalf("after deleting pod doomed, candidates:\n%swant:\n%s", g, w)
			}
		})
	}
}

// waitUntil polls cond every 20 ms for at most 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1500 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// logBuffer collects a controller's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runController runs the controller with command-line args (as the
// shipped ServiceAccount, the local store in dir, no metrics server, no
// leader election) and returns the address map's URL once it is served;
// the controller stops when the test ends.
func runController(t *testing.T, s *kubetest.Server, dir string, args ...string) string {
	t.Helper()
	env := map[string]string{"IPKEEPER_DATASTORE": "local", "IPKEEPER_LOCAL_PATH": dir}
	fs := pflag.NewFlagSet("ipkeeper-controller", pflag.ContinueOnError)
	var o Options
	o.register(fs, func(k string) string { return env[k] })
	args = append([]string{"--kubeconfig", s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"),
		"--metrics-addr", "", "--leader-elect=false", "--leak-grace", "1h", "--resync", "1h"}, args...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, o, logs, func(k string) string { return env[k] }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	re := regexp.MustCompile(`"msg":"serving the address map","url":"(http://[^"]+)"`)
	var url string
	waitUntil(t, "the controller to serve the address map", func() bool {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			url = m[1]
			return true
		}
		select {
		case err := <-errc:
			errc <- err
			t.Fatalf("the controller stopped: %v\n%s", err, logs)
		default:
		}
		return false
	})
	return strings.Replace(url, "0.0.0.0", "127.0.0.1", 1)
}

// get GETs url with token (none when "") and returns the status and body.
func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// mapPools is what the test reads of /api/pools.
type mapPools struct {
	Pools []struct {
		Name   string `json:"name"`
		InUse  int    `json:"inUse"`
		Leaks  int    `json:"leaks"`
		Blocks []struct {
			CIDR  string `json:"cidr"`
			Leaks int    `json:"leaks"`
		} `json:"blocks"`
	} `json:"pools"`
}

// checkLeakShown waits until the map at url (read with token) shows pool
// with one leak candidate, gone's address, and checks the block's detail.
func checkLeakShown(t *testing.T, url, token string, pool ipam.Pool, gone ipam.Handle) {
	t.Helper()
	var ov mapPools
	waitUntil(t, "the leak candidate on the map", func() bool {
		code, b := get(t, url+"api/pools", token)
		if code != http.StatusOK {
			t.Fatalf("GET api/pools: %d %s", code, b)
		}
		ov = mapPools{}
		if err := json.Unmarshal(b, &ov); err != nil {
			t.Fatal(err)
		}
		return len(ov.Pools) == 1 && ov.Pools[0].Leaks > 0
	})
	if p := ov.Pools[0]; p.Name != pool.Name || p.InUse != 2 || p.Leaks != 1 || len(p.Blocks) != 1 || p.Blocks[0].Leaks != 1 {
		t.Fatalf("/api/pools: %+v, want pool %s with 2 in use and 1 leak candidate in its one block", ov, pool.Name)
	}
	code, b := get(t, url+"api/blocks/"+gone.IPs[0].Block.String(), token)
	if code != http.StatusOK {
		t.Fatalf("GET api/blocks: %d %s", code, b)
	}
	var d struct {
		Leaks     int `json:"leaks"`
		Addresses []struct {
			Addr   string               `json:"addr"`
			State  string               `json:"state"`
			Handle string               `json:"handle"`
			Leak   *webui.LeakCandidate `json:"leak"`
		} `json:"addresses"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var leaked []string
	for _, a := range d.Addresses {
		if a.State == "leak" {
			leaked = append(leaked, fmt.Sprintf("%s %s %s %s", a.Addr, a.Handle, a.Leak.Pod, a.Leak.Reason))
		}
	}
	wantReason := fmt.Sprintf("pod-gone: pod %s/%s (UID not recorded) no longer exists", gone.Namespace, gone.Pod)
	if want := fmt.Sprintf("%s %s %s/%s %s", gone.IPs[0].Addr, gone.ID, gone.Namespace, gone.Pod, wantReason); d.Leaks != 1 ||
		len(leaked) != 1 || leaked[0] != want {
		t.Fatalf("block %s: %d leaks, leak rows %q, want [%q]", gone.IPs[0].Block, d.Leaks, leaked, want)
	}
}

// TestControllerServesAddressMap runs ipkeeper-controller (its flags, the
// shipped RBAC, a local store) against the real API server: on loopback
// the map needs no token and shows the leak candidate; on all interfaces
// it refuses to start without a way to check tokens, and with
// --map-tokenreview it accepts a ServiceAccount's token the API server
// authenticates (of an account --map-allow names) and answers 401 without
// a token, to a made-up one and to another account's valid one.
func TestControllerServesAddressMap(t *testing.T) {
	for _, f := range passFamilies {
		t.Run(f.name, func(t *testing.T) {
			s := kubetest.Require(t, srv)
			ctx := context.Background()
			dir, ns, gone := mapFixture(t, s, f.pool)

			t.Run("loopback", func(t *testing.T) {
				url := runController(t, s, dir, "--map-addr", "127.0.0.1:0")
				checkLeakShown(t, url, "", f.pool, gone)
				checkLeakInBrowser(t, url, f.pool, gone)
			})
			t.Run("no token beyond loopback", func(t *testing.T) {
				env := map[string]string{"IPKEEPER_DATASTORE": "local", "IPKEEPER_LOCAL_PATH": dir}
				fs := pflag.NewFlagSet("ipkeeper-controller", pflag.ContinueOnError)
				var o Options
				o.register(fs, func(k string) string { return env[k] })
				if err := fs.Parse([]string{"--kubeconfig", s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"),
					"--metrics-addr", "", "--leader-elect=false", "--map-addr", "0.0.0.0:0"}); err != nil {
					t.Fatal(err)
				}
				err := Run(ctx, o, io.Discard, func(k string) string { return env[k] })
				if !errors.Is(err, webui.ErrNeedToken) || !strings.Contains(err.Error(), "--map-tokenreview") {
					t.Fatalf("Run on 0.0.0.0 without a token: %v, want %v naming --map-tokenreview", err, webui.ErrNeedToken)
				}
			})
			t.Run("tokenreview without an allow list", func(t *testing.T) {
				env := map[string]string{"IPKEEPER_DATASTORE": "local", "IPKEEPER_LOCAL_PATH": dir}
				fs := pflag.NewFlagSet("ipkeeper-controller", pflag.ContinueOnError)
				var o Options
				o.register(fs, func(k string) string { return env[k] })
				if err := fs.Parse([]string{"--kubeconfig", s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"),
					"--metrics-addr", "", "--leader-elect=false", "--map-addr", "0.0.0.0:0", "--map-tokenreview"}); err != nil {
					t.Fatal(err)
				}
				// A controller that starts anyway runs until this ends.
				short, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				err := Run(short, o, io.Discard, func(k string) string { return env[k] })
				if err == nil || !strings.Contains(err.Error(), "--map-allow") {
					t.Fatalf("Run with --map-tokenreview and no --map-allow: %v, want a refusal naming --map-allow", err)
				}
			})
			t.Run("tokenreview", func(t *testing.T) {
				reader := s.ServiceAccountToken(t, ns, "map-reader")
				other := s.ServiceAccountToken(t, ns, "someone-else")
				url := runController(t, s, dir, "--map-addr", "0.0.0.0:0", "--map-tokenreview",
					"--map-allow", "system:serviceaccount:"+ns+":map-reader")
				for _, c := range []struct {
					name, token string
					want        int
				}{
					{"no token", "", http.StatusUnauthorized},
					{"made-up token", "not-a-token", http.StatusUnauthorized},
					{"a ServiceAccount not allowed", other, http.StatusUnauthorized},
					{"the allowed ServiceAccount", reader, http.StatusOK},
					{"a tampered token", tamper(reader), http.StatusUnauthorized},
				} {
					if code, b := get(t, url+"api/pools", c.token); code != c.want {
						t.Errorf("%s: %d %s, want %d", c.name, code, b, c.want)
					}
				}
				checkLeakShown(t, url, reader, f.pool, gone)
			})
		})
	}
}

// tamper changes one character in the middle of a token's signature (the
// last one may carry only padding bits).
func tamper(tok string) string {
	i := len(tok) - 20
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

// mapFixture makes, without informers of the test's own (Run sets klog's
// logger, which running informers read), a namespace with a node and a
// running pod "live", and a local store with pool holding live's address
// and that of pod "gone", which never existed. It returns the store's
// directory, the namespace and gone's handle.
func mapFixture(t *testing.T, s *kubetest.Server, pool ipam.Pool) (string, string, ipam.Handle) {
	t.Helper()
	ctx := context.Background()
	ns, node := namespaceAndNode(t, s, "m")
	dir := t.TempDir()
	st, err := datastore.Open(ctx, config.Datastore{Type: config.DatastoreLocal, Path: dir}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := allocator.New(st, nil)
	a.Now = func() time.Time { return t0 }
	if _, err := a.EnsurePool(ctx, pool); err != nil {
		t.Fatal(err)
	}
	hs := map[string]ipam.Handle{}
	for _, pod := range []string{"live", "gone"} {
		h, err := a.Allocate(ctx, allocator.Request{
			Handle: ipam.Handle{ID: ipam.HandleID("net", pod, "eth0"), Network: "net", ContainerID: pod, IfName: "eth0",
				Node: node, Namespace: ns, Pod: pod},
			Sets: [][]string{{pool.Name}},
		})
		if err != nil {
			t.Fatal(err)
		}
		hs[pod] = h
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	p, err = s.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := hs["live"].IPs[0].Addr.String()
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
	if _, err := s.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir, ns, hs["gone"]
}

// namespaceAndNode creates a namespace named prefix plus a number and a
// node named after it ("-a"; deleted when the test ends).
func namespaceAndNode(t *testing.T, s *kubetest.Server, prefix string) (ns, node string) {
	t.Helper()
	ctx := context.Background()
	ns = strings.ToLower(fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1e9))
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node = ns + "-a"
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	return ns, node
}
