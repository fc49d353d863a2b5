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

// watchListTimeout is watchTimeout for a watch-list, which sends every
// object again when it is opened again (gzipped: at 5 000 nodes of four
// blocks about 30 MB, once in 30 to 60 minutes).
var watchListTimeout = 30 * time.Minute

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
// start of one of its WATCH requests (started; first for the stream's
// first), or its end (err). On a watch-list, the objects as they are when
// it starts come first (initial), then a bookmark ending them
// (initialEnd).
type streamItem struct {
	k          kind
	typ        string
	obj        *object
	rv         string
	started    bool
	first      bool
	initial    bool
	initialEnd bool
	err        error
}

// stream follows k from resourceVersion rv until ctx ends or a WATCH
// fails, sending what it reads to out: each WATCH the API server ends at
// its timeout is opened again from the last resourceVersion an event or
// bookmark carried (an initial object of a watch-list carries none: its
// own resourceVersion is not the stream's). Each WATCH's answer is
// reported (started) before its events.
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
		list := !w.plainWatch.Load()
		err := w.watchOnce(ctx, k, rv, list, func(it streamItem) bool {
			if it.started {
				it.first, first = first, false
			}
			if it.rv != "" && !it.initial {
				rv = it.rv
			}
			return send(it)
		})
		if ctx.Err() != nil {
			return
		}
		if list && errors.Is(err, errNoWatchList) {
			// An API server without watch-lists: regular WATCHes from
			// here on, for every stream of this Watcher.
			w.plainWatch.Store(true)
			continue
		}
		if err != nil {
			send(streamItem{k: k, err: err})
			return
		}
	}
}

// errNoWatchList is a watch-list the API server refused (400 or 422: the
// WatchList feature is off, or the server predates it).
var errNoWatchList = errors.New("the API server does not serve watch-lists")

// watchOnce sends one WATCH of k from rv and hands its answer and events
// to fn, until the API server ends it (nil), it fails, or fn returns
// false.
//
// With list set it is a watch-list (sendInitialEvents): the API server
// sends every object of k as it is at rv or later (ADDED, handed to fn
// as initial), a bookmark ending them (initialEnd), then the changes, as
// a WATCH from rv would. The API server gzips a watch-list's events for a
// client that accepts gzip (Go's transport asks for it and inflates),
// where it sends those of a WATCH from a resourceVersion as they are: a
// changed block's object gzips about ninefold. The objects sent again at
// each start are the price, hence the longer timeout.
func (w *Watcher) watchOnce(ctx context.Context, k kind, rv string, list bool, fn func(streamItem) bool) error {
	base := watchTimeout
	if list {
		base = watchListTimeout
	}
	timeout := base + rand.N(base+1)
	ctx, cancel := context.WithTimeout(ctx, timeout+watchStall)
	defer cancel()
	req0 := w.s.rc.Get().Resource(k.resource).Param("labelSelector", w.s.selector()).
		Param("watch", "true").Param("allowWatchBookmarks", "true").Param("resourceVersion", rv).
		Param("timeoutSeconds", strconv.Itoa(int(timeout/time.Second)))
	if list {
		req0 = req0.Param("sendInitialEvents", "true").Param("resourceVersionMatch", "NotOlderThan")
	}
	u := req0.URL()
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
		err := statusError(res.StatusCode, body)
		if list && (apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)) {
			return fmt.Errorf("%w: watch of %s: %v", errNoWatchList, k.resource, err)
		}
		return watchErr("watch of "+k.resource, err)
	}
	if !fn(streamItem{k: k, started: true}) {
		return nil
	}
	initial := list
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
		it := streamItem{k: k, typ: ev.Type, obj: &o, rv: o.Metadata.ResourceVersion}
		if initial {
			switch {
			case ev.Type == "BOOKMARK" && o.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true":
				it.initialEnd, initial = true, false
			case ev.Type == "ADDED":
				it.initial = true
			}
		}
		if !fn(it) {
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
