package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
)

// The HTTP side of Watcher: LISTs at a resourceVersion and WATCH
// streams of one resource, sent through the store's REST client (its
// URLs, credentials and transport) and decoded into this package's own
// object type, as every other read of the backend is.

// watchTimeout is the server-side length of one WATCH request
// (timeoutSeconds, jittered up to twice as long, as client-go's reflector
// does): the API server ends it cleanly and the stream is opened again
// from the last resourceVersion seen, bookmarks included.
var watchTimeout = 5 * time.Minute

// watchStall is how long past its timeoutSeconds a WATCH may stay open
// without ending: a connection that died silently (no RST) is given up
// then, and the watch fails.
const watchStall = 30 * time.Second

// listed is a LIST's objects and the resourceVersion it was read at.
type listed struct {
	items []object
	rv    string
}

// listRV LISTs every object of k in the partition, page by page. With rv
// "" the first page is read up to date and sets the list's
// resourceVersion; otherwise every page is read at exactly rv (a
// resourceVersion the etcd under the API server compacted away is 410
// Gone: storeview.ErrExpired). The continuation pages stay at the first
// page's resourceVersion.
func (s *Store) listRV(ctx context.Context, k kind, rv string) (listed, error) {
	var out listed
	cont := ""
	for {
		req := s.rc.Get().Resource(k.resource).Param("labelSelector", s.selector()).Param("limit", strconv.Itoa(listPage))
		switch {
		case cont != "":
			req = req.Param("continue", cont)
		case rv != "":
			req = req.Param("resourceVersion", rv).Param("resourceVersionMatch", "Exact")
		}
		raw, err := do(ctx, req)
		if err != nil {
			return listed{}, watchErr("list of "+k.resource, err)
		}
		var l struct {
			Metadata struct {
				Continue        string `json:"continue,omitempty"`
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Items []object `json:"items"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			return listed{}, fmt.Errorf("%w: list of %s: undecodable answer: %v", store.ErrCorrupt, k.resource, err)
		}
		for i := range l.Items {
			if err := s.checkPartition(k, &l.Items[i]); err != nil {
				return listed{}, err
			}
		}
		out.items = append(out.items, l.Items...)
		if out.rv == "" {
			out.rv = l.Metadata.ResourceVersion
		}
		if l.Metadata.Continue == "" {
			if out.rv == "" {
				return listed{}, fmt.Errorf("%w: list of %s: the answer holds no resourceVersion", store.ErrUnavailable, k.resource)
			}
			return out, nil
		}
		cont = l.Metadata.Continue
	}
}

// watchEvent is one event of a WATCH stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// streamItem is what a kind's stream hands to Watch: an event, the
// stream's start (started), or its end (err).
type streamItem struct {
	k       kind
	typ     string
	obj     *object
	rv      string
	started bool
	err     error
}

// stream follows k from resourceVersion rv until ctx ends or a WATCH
// fails, sending what it reads to out: each WATCH the API server ends at
// its timeout is opened again from the last resourceVersion an event or
// bookmark carried. The first WATCH's answer is reported (started) before
// its events.
func (w *Watcher) stream(ctx context.Context, k kind, rv string, out chan<- streamItem) {
	send := func(it streamItem) bool {
		select {
		case out <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	first := true
	for {
		err := w.watchOnce(ctx, k, rv, func(it streamItem) bool {
			if it.started {
				if !first {
					return true
				}
				first = false
			}
			if it.rv != "" {
				rv = it.rv
			}
			return send(it)
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			send(streamItem{k: k, err: err})
			return
		}
	}
}

// watchOnce sends one WATCH of k from rv and hands its answer and events
// to fn, until the API server ends it (nil), it fails, or fn returns
// false.
func (w *Watcher) watchOnce(ctx context.Context, k kind, rv string, fn func(streamItem) bool) error {
	timeout := watchTimeout + rand.N(watchTimeout+1)
	ctx, cancel := context.WithTimeout(ctx, timeout+watchStall)
	defer cancel()
	u := w.s.rc.Get().Resource(k.resource).Param("labelSelector", w.s.selector()).
		Param("watch", "true").Param("allowWatchBookmarks", "true").Param("resourceVersion", rv).
		Param("timeoutSeconds", strconv.Itoa(int(timeout/time.Second))).URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("%w: watch of %s: %v", store.ErrInvalid, k.resource, err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := w.hc.Do(req)
	if err != nil {
		return watchErr("watch of "+k.resource, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		return watchErr("watch of "+k.resource, statusError(res.StatusCode, body))
	}
	if !fn(streamItem{k: k, started: true}) {
		return nil
	}
	dec := json.NewDecoder(res.Body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) && ctx.Err() == nil {
				return nil // ended by the API server (timeoutSeconds)
			}
			return watchErr("watch of "+k.resource, err)
		}
		if ev.Type == "ERROR" {
			var st metav1.Status
			if err := json.Unmarshal(ev.Object, &st); err != nil {
				return fmt.Errorf("%w: watch of %s: undecodable error event: %v", store.ErrUnavailable, k.resource, err)
			}
			return watchErr("watch of "+k.resource, &apierrors.StatusError{ErrStatus: st})
		}
		var o object
		if err := json.Unmarshal(ev.Object, &o); err != nil {
			return fmt.Errorf("%w: watch of %s: undecodable %s event: %v", store.ErrCorrupt, k.resource, ev.Type, err)
		}
		if !fn(streamItem{k: k, typ: ev.Type, obj: &o, rv: o.Metadata.ResourceVersion}) {
			return nil
		}
	}
}

// statusError is the error of a non-200 answer: its Status when the body
// holds one.
func statusError(code int, body []byte) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		if st.Code == 0 {
			st.Code = int32(code)
		}
		return &apierrors.StatusError{ErrStatus: st}
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code),
		Reason: metav1.StatusReasonUnknown, Message: fmt.Sprintf("the API server answered %d: %.200s", code, body)}}
}

// watchErr maps a LIST's or WATCH's error: 410 Gone (the resourceVersion
// is older than the API server's watch cache or etcd's compaction) is
// storeview.ErrExpired, the others as every request's (mapErr).
func watchErr(what string, err error) error {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return fmt.Errorf("%w: %s: %v", storeview.ErrExpired, what, err)
	}
	return mapErr(what, err)
}
