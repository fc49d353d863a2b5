package etcd_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestWatchReportsPutsAndDeletesAfterRevision: Revision moves with every
// write, and Watch from a revision replays exactly the later changes under
// its prefix — puts with their versions, deletes with the deletion's
// revision — and none under other prefixes or of other stores.
func TestWatchReportsPutsAndDeletesAfterRevision(t *testing.T) {
	srv := etcdtest.ForTest(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(prefix string) *etcd.Store {
		s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s, other := open("/w"), open("/w-other")
	put := func(st *etcd.Store, k, v string) int64 {
		rev, err := kv.TxnRevision(ctx, st, nil, []kv.Op{{Key: k, Value: []byte(v)}})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put(s, "blocks/a", "before")
	start, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1 := put(s, "blocks/a", "one")
	put(other, "blocks/a", "elsewhere")
	put(s, "pools/p", "not watched")
	r2 := put(s, "blocks/b", "two")
	if err := s.Txn(ctx, nil, []kv.Op{{Key: "blocks/a", Delete: true}}); err != nil {
		t.Fatal(err)
	}
	end, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !(start < r1 && r1 < r2 && r2 < end) {
		t.Fatalf("revisions do not grow: start %d, puts %d %d, after delete %d", start, r1, r2, end)
	}
	want := []etcd.Event{
		{Key: "blocks/a", Value: []byte("one"), Version: r1},
		{Key: "blocks/b", Value: []byte("two"), Version: r2},
		{Key: "blocks/a", Version: end, Delete: true},
	}
	var got []etcd.Event
	wctx, wcancel := context.WithCancel(ctx)
	err = s.Watch(wctx, "blocks/", start, func(rev int64, evs []etcd.Event) {
		for _, e := range evs {
			if e.Version > rev {
				t.Errorf("change of %s at %d reported in a response of revision %d", e.Key, e.Version, rev)
			}
		}
		got = append(got, evs...)
		if len(got) >= len(want) {
			wcancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled after the last event", err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Key != w.Key || string(g.Value) != string(w.Value) || g.Version != w.Version || g.Delete != w.Delete {
			t.Errorf("event %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestWatchUnreachable: a stream that cannot be opened wraps
// store.ErrUnavailable.
func TestWatchUnreachable(t *testing.T) {
	port, err := etcdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{fmt.Sprintf("127.0.0.1:%d", port)}, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Watch(ctx, "", 0, func(int64, []etcd.Event) {})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Watch on a closed port: %v, want store.ErrUnavailable", err)
	}
	if _, err := s.Revision(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Revision on a closed port: %v, want store.ErrUnavailable", err)
	}
}

// TestWatchTLS: over TLS, with a server certificate that has only the
// serverAuth usage, Watch reports a change; the client certificate and
// the CA are checked as for reads and writes, and a refusal wraps
// store.ErrUnavailable.
func TestWatchTLS(t *testing.T) {
	good, other := newPKI(t, "watch"), newPKI(t, "other")
	if u := extKeyUsage(t, good.serverCert); len(u) != 1 || u[0] != x509.ExtKeyUsageServerAuth {
		t.Fatalf("server certificate usages %v, want serverAuth alone", u)
	}
	srv := etcdtest.ForTest(t, &etcdtest.TLS{CertFile: good.serverCert, KeyFile: good.serverKey, CAFile: good.ca})
	for _, tc := range []struct {
		name    string
		cfg     etcd.Config
		refused bool
		// wantInMsg is what the refusal names. The server's refusal of a
		// client certificate arrives (TLS 1.3) after the client's
		// handshake has ended, and the HTTP/2 transport may then report
		// only that the connection could not be established: that case
		// checks the refusal alone.
		wantInMsg string
	}{
		{name: "client cert", cfg: etcd.Config{CAFile: good.ca, CertFile: good.clientCert, KeyFile: good.clientKey}},
		{name: "wrong CA", cfg: etcd.Config{CAFile: other.ca, CertFile: good.clientCert, KeyFile: good.clientKey}, refused: true, wantInMsg: "caFile"},
		{name: "client cert from another CA", cfg: etcd.Config{CAFile: good.ca, CertFile: other.clientCert, KeyFile: other.clientKey}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			tc.cfg.Endpoints, tc.cfg.Prefix, tc.cfg.RequestTimeout = []string{srv.Endpoint}, "/watchtls", 5*time.Second
			s, err := etcd.Open(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if tc.refused {
				err := s.Watch(ctx, "", 0, func(int64, []etcd.Event) { t.Error("an event through a refused connection") })
				if !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("Watch = %v, want store.ErrUnavailable", err)
				}
				if tc.wantInMsg != "" && (!errors.Is(err, etcd.ErrTLS) || !strings.Contains(err.Error(), tc.wantInMsg)) {
					t.Fatalf("Watch = %v, want ErrTLS naming %s", err, tc.wantInMsg)
				}
				return
			}
			start, err := s.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rev, err := kv.TxnRevision(ctx, s, nil, []kv.Op{{Key: "k", Value: []byte("v")}})
			if err != nil {
				t.Fatal(err)
			}
			var got []etcd.Event
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			err = s.Watch(wctx, "", start, func(_ int64, evs []etcd.Event) {
				got = append(got, evs...)
				wcancel()
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Watch over TLS: %v", err)
			}
			if len(got) != 1 || got[0].Key != "k" || string(got[0].Value) != "v" || got[0].Version != rev {
				t.Fatalf("events %+v, want the put of k at %d", got, rev)
			}
		})
	}
}

// extKeyUsage reads the extended key usages of a PEM certificate file.
func extKeyUsage(t *testing.T, path string) []x509.ExtKeyUsage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s holds no PEM block", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.ExtKeyUsage
}

// TestWatchCompacted: a watch from a revision etcd has compacted away
// ends with ErrWatchCompacted (the caller re-reads), not as unavailable;
// a watch from the compaction's revision on works.
func TestWatchCompacted(t *testing.T) {
	// A server of its own: the compaction would cut the history other
	// tests read.
	srv := etcdtest.ForTest(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := etcd.Open(ctx, etcd.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/compacted"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range 3 {
		if last, err = kv.TxnRevision(ctx, s, nil, []kv.Op{{Key: "k", Value: fmt.Appendf(nil, "%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Compact(ctx, last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	err = s.Watch(ctx, "", start, func(int64, []etcd.Event) { t.Error("an event of a compacted revision") })
	if !errors.Is(err, etcd.ErrWatchCompacted) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Watch from compacted revision %d: %v, want ErrWatchCompacted", start, err)
	}
	put, err := kv.TxnRevision(ctx, s, nil, []kv.Op{{Key: "k", Value: []byte("after")}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var got []etcd.Event
	err = s.Watch(wctx, "", last, func(_ int64, evs []etcd.Event) { got = append(got, evs...); wcancel() })
	if !errors.Is(err, context.Canceled) || len(got) != 1 || got[0].Version != put {
		t.Fatalf("Watch from the compaction: %v, events %+v, want the put at %d", err, got, put)
	}
}

// TestWatchConnectionCut: a watch whose connection breaks returns an
// error wrapping store.ErrUnavailable (the caller re-reads and watches
// again) rather than waiting for events that cannot come.
func TestWatchConnectionCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p := etcdtest.NewProxy(t, strings.TrimPrefix(server.Endpoint, "http://"))
	s := open(t, func(c *etcd.Config) { c.Endpoints = []string{"http://" + p.Addr()} })
	defer s.Close()
	start, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Txn(ctx, nil, []kv.Op{{Key: "k", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	seen := false
	err = s.Watch(ctx, "", start, func(int64, []etcd.Event) {
		if !seen {
			seen = true
			p.Refuse(true)
			p.Cut()
		}
	})
	if !seen || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Watch after its connection was cut: %v (event seen: %v), want store.ErrUnavailable", err, seen)
	}
	t.Logf("%v", err)
}
