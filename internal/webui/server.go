package webui

import (
	"bytes"
	"compress/gzip"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

// minEventGap spaces the live updates one page receives: changes that
// arrive closer together are sent as one.
const minEventGap = 150 * time.Millisecond

// heartbeat keeps idle event streams (and proxies) from timing out.
const heartbeat = 20 * time.Second

// ServeHTTP serves the page and its JSON API (see the package doc).
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.h.ServeHTTP(w, r)
}

// handler builds the routes behind the guard.
func (u *UI) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", cacheShort(files)))
	mux.HandleFunc("GET /api/pools", u.servePools)
	mux.HandleFunc("GET /api/nodes", u.serveNodes)
	mux.HandleFunc("GET /api/blocks/{cidr...}", u.serveBlock)
	mux.HandleFunc("GET /api/search", u.serveSearch)
	mux.HandleFunc("GET /api/events", u.serveEvents)
	mux.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API: "+r.URL.Path)
	})
	return u.guard(mux)
}

func cacheShort(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// viewCache keeps the rendered overview and node table of one generation.
type viewCache struct {
	mu    sync.Mutex
	gen   uint64
	valid bool
	pools cachedBody
	nodes cachedBody
}

type cachedBody struct {
	plain, gz []byte
}

func newCached(v any) (cachedBody, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return cachedBody{}, err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return cachedBody{plain: b, gz: buf.Bytes()}, nil
}

// views returns the overview and node table of the model's current
// generation, rendering them once per generation.
func (u *UI) views() (cachedBody, cachedBody, uint64, error) {
	u.cache.mu.Lock()
	defer u.cache.mu.Unlock()
	u.m.mu.RLock()
	defer u.m.mu.RUnlock()
	if u.cache.valid && u.cache.gen == u.m.gen {
		return u.cache.pools, u.cache.nodes, u.cache.gen, nil
	}
	p, err := newCached(u.m.buildOverview())
	if err != nil {
		return cachedBody{}, cachedBody{}, 0, err
	}
	n, err := newCached(u.m.buildNodes())
	if err != nil {
		return cachedBody{}, cachedBody{}, 0, err
	}
	u.cache.pools, u.cache.nodes, u.cache.gen, u.cache.valid = p, n, u.m.gen, true
	return p, n, u.m.gen, nil
}

func (u *UI) servePools(w http.ResponseWriter, r *http.Request) {
	p, _, gen, err := u.views()
	u.serveCached(w, r, p, gen, err)
}

func (u *UI) serveNodes(w http.ResponseWriter, r *http.Request) {
	_, n, gen, err := u.views()
	u.serveCached(w, r, n, gen, err)
}

func (u *UI) serveCached(w http.ResponseWriter, r *http.Request, b cachedBody, gen uint64, err error) {
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	etag := `"` + strconv.FormatUint(gen, 10) + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "application/json")
	h.Set("Vary", "Accept-Encoding")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := b.plain
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		h.Set("Content-Encoding", "gzip")
		body = b.gz
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func (u *UI) serveBlock(w http.ResponseWriter, r *http.Request) {
	ref, bare, err := parseBlockRef(r.PathValue("cidr"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	u.m.mu.RLock()
	d, err := u.m.blockDetail(ref, bare, r.URL.Query().Get("pool"))
	u.m.mu.RUnlock()
	switch {
	case errors.Is(err, errNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		writeJSON(w, d)
	}
}

func (u *UI) serveSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("q")
	if strings.TrimSpace(q) == "" {
		writeError(w, http.StatusBadRequest, "q is empty: search for an IP address, a block, a pod, a node or a handle")
		return
	}
	if len(q) > 256 {
		writeError(w, http.StatusBadRequest, "q is longer than 256 characters")
		return
	}
	u.m.mu.RLock()
	res := u.m.search(q)
	u.m.mu.RUnlock()
	writeJSON(w, res)
}

// serveEvents streams server-sent events: an "update" event with the
// revision and generation now, and again after every change (changes less
// than minEventGap apart are sent as one), until the client goes away.
func (u *UI) serveEvents(w http.ResponseWriter, r *http.Request) {
	if _, ok := w.(http.Flusher); !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported here")
		return
	}
	// The stream outlives the server's write timeout: one write deadline
	// per event instead, so that a client that stops reading is still
	// let go. (The server's read timeout ends with the request's header:
	// a GET has no body.)
	rc := http.NewResponseController(w)
	write := func(format string, a ...any) error {
		_ = rc.SetWriteDeadline(time.Now().Add(u.limits.write))
		if _, err := fmt.Fprintf(w, format, a...); err != nil {
			return err
		}
		return rc.Flush()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	_ = rc.SetWriteDeadline(time.Now().Add(u.limits.write))
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 1000\n\n")
	var sent uint64
	first := true
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		gen, ch := u.m.wait()
		if first || gen != sent {
			u.m.mu.RLock()
			rev, loaded := u.m.rev, u.m.loaded
			errMsg := ""
			if u.m.status != nil {
				errMsg = u.m.status.Error()
			}
			u.m.mu.RUnlock()
			msg, _ := json.Marshal(map[string]any{"revision": rev, "generation": gen, "loaded": loaded, "error": errMsg})
			if err := write("event: update\ndata: %s\n\n", msg); err != nil {
				return
			}
			sent, first = gen, false
			select {
			case <-r.Context().Done():
				return
			case <-time.After(minEventGap):
			}
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		case <-beat.C:
			if err := write(": keep-alive\n\n"); err != nil {
				return
			}
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// Serve runs the map on l until ctx ends: Run keeps it current while an
// HTTP server answers on l. It refuses a listener on a non-loopback
// address when New was given a loopback Listen and no token. The server
// bounds how long a request may take to arrive and how long a connection
// may idle, closes the connection of every refused request, and keeps at
// most a few dozen connections open that no request was authorized on
// (serverLimits). It returns nil after ctx ended and the server shut
// down.
func (u *UI) Serve(ctx context.Context, l net.Listener) error {
	if need, err := NeedsToken(l.Addr().String()); err == nil && need && !u.needToken {
		return fmt.Errorf("%w: the listener is on %s, but the map was configured for %s", ErrNeedToken, l.Addr(), u.opts.Listen)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := u.newServer(ctx, u)
	var wg sync.WaitGroup
	wg.Go(func() { _ = u.Run(ctx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(gate(l, u.limits.maxPending)) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
