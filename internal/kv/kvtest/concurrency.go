package kvtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Increment adds one to the decimal counter stored at key with a
// read-modify-write CAS loop, retrying on store.ErrConflict, and returns the
// value it wrote and how many conflicts it retried. A missing key counts as
// 0. Backends use it in their multi-process tests too.
func Increment(ctx context.Context, s kv.Store, key string) (n int64, conflicts int, err error) {
	for {
		kvs, err := s.Get(ctx, key)
		if err != nil {
			return 0, conflicts, err
		}
		cur := kvs[0]
		var v int64
		if cur.Version != 0 {
			if v, err = strconv.ParseInt(string(cur.Value), 10, 64); err != nil {
				return 0, conflicts, fmt.Errorf("counter %q holds %q: %w", key, cur.Value, err)
			}
		}
		v++
		err = s.Txn(ctx,
			[]kv.Cond{{Key: key, Version: cur.Version}},
			[]kv.Op{{Key: key, Value: []byte(strconv.FormatInt(v, 10))}})
		if err == nil {
			return v, conflicts, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return 0, conflicts, err
		}
		conflicts++
	}
}

// testConcurrentIncrements is the lost-update test: goroutines increment
// one counter through Get + CAS Txn; every increment must survive.
func testConcurrentIncrements(t *testing.T, s kv.Store) {
	const workers, perWorker = 8, 25
	var (
		wg        sync.WaitGroup
		conflicts atomic.Int64
		errs      = make(chan error, workers)
		mu        sync.Mutex
		written   = map[int64]bool{}
	)
	for w := range workers {
		wg.Go(func() {
			for range perWorker {
				n, c, err := Increment(t.Context(), s, "counter")
				conflicts.Add(int64(c))
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				mu.Lock()
				dup := written[n]
				written[n] = true
				mu.Unlock()
				if dup {
					errs <- fmt.Errorf("worker %d: value %d was committed twice (lost update)", w, n)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e := get(t, s, "counter")
	if got := string(e.Value); got != strconv.Itoa(workers*perWorker) {
		t.Fatalf("counter = %s after %d increments (%d conflicts retried): lost updates", got, workers*perWorker, conflicts.Load())
	}
	t.Logf("%d increments by %d goroutines, %d conflicts retried", workers*perWorker, workers, conflicts.Load())
}

// testConcurrentCreate races create-if-absent on one key: exactly one
// writer may win, the others must see store.ErrConflict.
func testConcurrentCreate(t *testing.T, s kv.Store) {
	const workers, rounds = 8, 10
	for r := range rounds {
		key := fmt.Sprintf("ips/pool/10.0.0.%d", r)
		var (
			wg    sync.WaitGroup
			wins  atomic.Int64
			start = make(chan struct{})
			errs  = make(chan error, workers)
		)
		for w := range workers {
			wg.Go(func() {
				<-start
				err := s.Txn(t.Context(),
					[]kv.Cond{{Key: key, Version: 0}},
					[]kv.Op{{Key: key, Value: []byte(strconv.Itoa(w))}})
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, store.ErrConflict):
					errs <- fmt.Errorf("worker %d: %w", w, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d writers created %q, want exactly 1", r, n, key)
		}
	}
}

// wantCtxErr fails unless err reports the context's end (or wraps
// store.ErrUnavailable) and is not a conflict.
func wantCtxErr(t *testing.T, err error, ctxErr error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded with a finished context", what)
	}
	if errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: got a conflict (%v), want the context error", what, err)
	}
	if !errors.Is(err, ctxErr) && !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%s: error %v wraps neither %v nor store.ErrUnavailable", what, err, ctxErr)
	}
}

func testCancelledContext(t *testing.T, s kv.Store) {
	v := put(t, s, "exists", []byte("before"))

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()

	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"expired", expired, context.DeadlineExceeded},
	} {
		err := c.ctx.Err()
		wantCtxErr(t, s.Txn(c.ctx, []kv.Cond{{Key: "new", Version: 0}}, []kv.Op{{Key: "new", Value: []byte("x")}}),
			err, c.name+" create")
		wantCtxErr(t, s.Txn(c.ctx, []kv.Cond{{Key: "exists", Version: v}},
			[]kv.Op{{Key: "exists", Value: []byte("after")}, {Key: "other", Value: []byte("y")}}),
			err, c.name+" CAS")
		wantCtxErr(t, s.Txn(c.ctx, nil, []kv.Op{{Key: "exists", Delete: true}}), err, c.name+" delete")
		_, gerr := s.Get(c.ctx, "exists")
		wantCtxErr(t, gerr, err, c.name+" Get")
		_, lerr := s.List(c.ctx, "")
		wantCtxErr(t, lerr, err, c.name+" List")
	}

	wantMissing(t, get(t, s, "new"), "new")
	wantMissing(t, get(t, s, "other"), "other")
	if e := get(t, s, "exists"); string(e.Value) != "before" || e.Version != v {
		t.Fatalf("after txns with finished contexts: %q@%d, want \"before\"@%d", e.Value, e.Version, v)
	}
	// The store still works afterwards.
	txn(t, s, []kv.Cond{{Key: "exists", Version: v}}, []kv.Op{{Key: "exists", Value: []byte("after")}})
}
