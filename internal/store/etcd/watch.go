package etcd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

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

// The JSON shapes of the gateway's streaming POST /v3/watch.
type watchCreate struct {
	CreateRequest struct {
		Key           string `json:"key"`
		RangeEnd      string `json:"range_end"`
		StartRevision string `json:"start_revision"`
	} `json:"create_request"`
}

type watchEvent struct {
	Type string   `json:"type"` // "PUT" (often omitted: the zero value) or "DELETE"
	KV   keyValue `json:"kv"`
}

type watchMessage struct {
	Result *struct {
		Header          header       `json:"header"`
		Created         bool         `json:"created"`
		Canceled        bool         `json:"canceled"`
		CompactRevision string       `json:"compact_revision"`
		CancelReason    string       `json:"cancel_reason"`
		Events          []watchEvent `json:"events"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Watch reports the changes to keys under prefix (relative to the store's
// prefix; "" for all of them) made after revision after: fn is called
// with the events of each watch response in revision order, and the
// response's revision (the cluster's revision when it was sent: at least
// every event's; replayed history may arrive in one response). It returns when ctx ends (with ctx's error), when
// the stream breaks (an error wrapping store.ErrUnavailable; the next call
// tries the next endpoint), or with ErrWatchCompacted. It never returns
// nil. fn runs on Watch's goroutine; Watch waits for it.
func (s *Store) Watch(ctx context.Context, prefix string, after int64, fn func(rev int64, evs []Event)) error {
	full := s.full(prefix)
	var wc watchCreate
	wc.CreateRequest.Key = b64(full)
	wc.CreateRequest.RangeEnd = b64(prefixEnd(full))
	wc.CreateRequest.StartRevision = itoa(after + 1)
	body, err := json.Marshal(wc)
	if err != nil {
		return fmt.Errorf("etcd: encode watch request: %w", err)
	}
	i := int(s.c.cur.Load()) % len(s.c.eps)
	ep := s.c.eps[i]
	fail := func(format string, args ...any) error {
		// Let the next attempt (of any caller) use the next member.
		s.c.cur.CompareAndSwap(int32(i), int32((i+1)%len(s.c.eps)))
		return fmt.Errorf("%w: etcd %s: watch: %s", store.ErrUnavailable, ep.name, fmt.Sprintf(format, args...))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.base+"/v3/watch", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("etcd: build watch request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ep.gw.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail("%v", scrub(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fail("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var m watchMessage
		if err := dec.Decode(&m); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fail("stream ended: %v", scrub(err))
		}
		if m.Error != nil {
			return fail("%s", m.Error.Message)
		}
		r := m.Result
		if r == nil {
			continue
		}
		if r.CompactRevision != "" && r.CompactRevision != "0" {
			return fmt.Errorf("%w: revision %d is before the compaction at %s", ErrWatchCompacted, after+1, r.CompactRevision)
		}
		if r.Canceled {
			return fail("canceled: %s", r.CancelReason)
		}
		if len(r.Events) == 0 {
			continue
		}
		rev, err := atoi(r.Header.Revision)
		if err != nil {
			return errors.New("etcd: undecodable watch revision")
		}
		evs := make([]Event, 0, len(r.Events))
		for _, e := range r.Events {
			k, err := unb64(e.KV.Key)
			if err != nil || !strings.HasPrefix(string(k), s.prefix) {
				return errors.New("etcd: watch reported a key outside the prefix")
			}
			key := string(k)[len(s.prefix):]
			if e.Type == "DELETE" {
				v, err := atoi(e.KV.ModRevision)
				if err != nil {
					return errors.New("etcd: undecodable mod_revision")
				}
				evs = append(evs, Event{Key: key, Version: v, Delete: true})
				continue
			}
			kvp, err := decodeKV(key, e.KV)
			if err != nil {
				return err
			}
			evs = append(evs, Event{Key: key, Value: kvp.Value, Version: kvp.Version})
		}
		fn(rev, evs)
	}
}
