package etcd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ErrWatchCompacted means Watch was asked for changes from a revision that
// etcd has compacted away: re-read the state and watch from its revision.
var ErrWatchCompacted = errors.New("etcd: watch start revision compacted")

// Event is one change reported by Watch.
type Event struct {
	// Key is relative to the store's prefix, as in kv.KeyValue.
	Key string
	// Value is the new value of a put; nil for a delete.
	Value []byte
	// Version is the key's new version (mod_revision) for a put, and the
	// revision of the deletion for a delete.
	Version int64
	// Delete is set when the key was deleted.
	Delete bool
}

// Revision returns the etcd cluster's current revision. It grows with
// every write to any key of the cluster, so an unchanged revision means
// nothing changed; a changed one means something may have.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	// A read of one key (the prefix itself, which the store never writes)
	// carries the header revision and nothing else.
	req := rangeRequest{Key: s.prefix, Serializable: s.serial}
	var resp rangeResponse
	if err := s.c.call(ctx, methodRange, req, &resp); err != nil {
		return 0, readErr(err)
	}
	if resp.Revision <= 0 {
		return 0, errors.New("etcd: answer without a header revision")
	}
	return resp.Revision, nil
}

// Watch reports the changes to keys under prefix (relative to the store's
// prefix; "" for all of them) made after revision after: fn is called
// with the events of each watch response in revision order, and the
// response's revision (the cluster's revision when it was sent: at least
// every event's; replayed history may arrive in one response). It
// returns when ctx ends (with ctx's error), when the stream breaks or
// cannot be opened (an error wrapping store.ErrUnavailable, and ErrTLS too
// when the connection's TLS failure is known; the next call tries the
// next endpoint), or with ErrWatchCompacted. It never returns nil. fn runs on Watch's
// goroutine; Watch waits for it.
//
// The watch is one call of etcd's Watch service, a gRPC stream on the
// HTTP/2 connection the unary calls use, with the same TLS configuration.
func (s *Store) Watch(ctx context.Context, prefix string, after int64, fn func(rev int64, evs []Event)) error {
	return s.watch(ctx, prefix, after, nil, fn)
}

// WatchProgress is Watch that also asks etcd for the watch's progress
// each time a value is received from progress, and reports etcd's answer
// as fn(rev, nil): every change up to rev has been reported. etcd answers
// only once the watch has caught up with its history (a request made
// before is dropped: ask again), and may report progress unasked.
func (s *Store) WatchProgress(ctx context.Context, prefix string, after int64, progress <-chan struct{},
	fn func(rev int64, evs []Event)) error {
	return s.watch(ctx, prefix, after, progress, fn)
}

func (s *Store) watch(ctx context.Context, prefix string, after int64, progress <-chan struct{},
	fn func(rev int64, evs []Event)) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := s.full(prefix)
	i := int(s.c.cur.Load()) % len(s.c.eps)
	ep := s.c.eps[i]
	fail := func(err error) error {
		if parent.Err() != nil {
			return parent.Err()
		}
		// Let the next attempt (of any caller) use the next member.
		s.c.cur.CompareAndSwap(int32(i), int32((i+1)%len(s.c.eps)))
		if !errors.Is(err, store.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	body := newOpenBody(ctx, encodeWatchCreate(full, prefixEnd(full), after+1), progress)
	defer body.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.base+methodWatch, body)
	if err != nil {
		return fmt.Errorf("etcd: build watch request: %w", err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := ep.hc.Do(req)
	if err != nil {
		return fail(classifyTransport(ep, err).err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fail(classifyStatus(ep, resp.StatusCode, 0, strings.TrimSpace(string(data))).err)
	}
	if code, msg, ok := grpcStatus(resp.Header); ok {
		// An answer without messages: the call failed at once.
		return fail(streamEnd(ep, code, msg))
	}
	r := bufio.NewReader(resp.Body)
	for {
		msg, err := readFrame(r)
		if err == io.EOF {
			code, msg, _ := grpcStatus(resp.Trailer)
			return fail(streamEnd(ep, code, msg))
		}
		if err != nil {
			return fail(fmt.Errorf("etcd %s: watch stream broken: %w", ep.name, scrub(err)))
		}
		var wr watchResponse
		if err := decodeWatchResponse(msg, &wr); err != nil {
			return fail(fmt.Errorf("etcd %s: watch: %w", ep.name, err))
		}
		if wr.CompactRevision != 0 {
			return fmt.Errorf("%w: revision %d is before the compaction at %d", ErrWatchCompacted, after+1, wr.CompactRevision)
		}
		if wr.Canceled {
			return fail(fmt.Errorf("etcd %s: watch canceled: %s", ep.name, wr.CancelReason))
		}
		if len(wr.Events) == 0 {
			if progress != nil && !wr.Created && wr.Revision > 0 {
				fn(wr.Revision, nil)
			}
			continue
		}
		evs, err := s.events(wr.Events)
		if err != nil {
			return err
		}
		fn(wr.Revision, evs)
	}
}

// events turns the events of a watch response into Events.
func (s *Store) events(wes []watchEvent) ([]Event, error) {
	evs := make([]Event, 0, len(wes))
	for _, e := range wes {
		if !strings.HasPrefix(string(e.KV.Key), s.prefix) {
			return nil, errors.New("etcd: watch reported a key outside the prefix")
		}
		key := string(e.KV.Key)[len(s.prefix):]
		if e.Delete {
			if e.KV.ModRevision <= 0 {
				return nil, errors.New("etcd: undecodable mod_revision")
			}
			evs = append(evs, Event{Key: key, Version: e.KV.ModRevision, Delete: true})
			continue
		}
		kvp, err := entry(key, e.KV)
		if err != nil {
			return nil, err
		}
		evs = append(evs, Event{Key: key, Value: kvp.Value, Version: kvp.Version})
	}
	return evs, nil
}

// streamEnd is the error of a watch stream that ended with gRPC status
// code (an ended watch is a failure whatever the code).
func streamEnd(ep *endpoint, code int, msg string) error {
	if code == 0 {
		return fmt.Errorf("etcd %s: watch stream ended", ep.name)
	}
	return classifyStatus(ep, http.StatusOK, code, msg).err
}

// openBody is the body of a watch request: the create request, then a
// progress request for each value received from progress, until it is
// closed or its context ends, so the stream's send side stays open while
// the watch lasts, as a gRPC client's does. The transport closes it when
// the stream ends; reading it never blocks the end of the call.
type openBody struct {
	ctx      context.Context
	msg      *bytes.Reader
	progress <-chan struct{}
	done     chan struct{}
	once     sync.Once
}

func newOpenBody(ctx context.Context, msg []byte, progress <-chan struct{}) *openBody {
	return &openBody{ctx: ctx, msg: bytes.NewReader(msg), progress: progress, done: make(chan struct{})}
}

func (b *openBody) Read(p []byte) (int, error) {
	if b.msg.Len() > 0 {
		return b.msg.Read(p)
	}
	select {
	case <-b.ctx.Done():
	case <-b.done:
	case <-b.progress:
		b.msg = bytes.NewReader(encodeWatchProgress())
		return b.msg.Read(p)
	}
	return 0, io.EOF
}

func (b *openBody) Close() error {
	b.once.Do(func() { close(b.done) })
	return nil
}
