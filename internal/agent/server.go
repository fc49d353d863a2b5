package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// Handler serves the agent protocol (see podinfo.AgentClient): GET
// podinfo.AgentLookupPath and podinfo.AgentReadyPath, and /healthz.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+podinfo.AgentLookupPath, a.serveLookup)
	mux.HandleFunc("POST "+podinfo.AgentCNIPath, a.serveCNI)
	mux.HandleFunc("GET "+podinfo.AgentReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, podinfo.AgentError{Reason: podinfo.ReasonUnavailable, Message: "caches not synced yet"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "node": a.node})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

func (a *Agent) serveLookup(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	q := r.URL.Query()
	ns, pod, uid, node := q.Get("namespace"), q.Get("pod"), q.Get("uid"), q.Get("node")
	if node == "" || (pod == "") != (ns == "") || pod == "" && uid != "" {
		writeJSON(w, http.StatusBadRequest, podinfo.AgentError{Reason: podinfo.ReasonBadRequest,
			Message: "want node, and namespace and pod together (uid only with a pod)"})
		return
	}
	info, err := a.Lookup(r.Context(), ns, pod, uid, node)
	if err != nil {
		ae, status := podinfo.AgentErrorOf(err)
		level := slog.LevelInfo
		if errors.Is(err, podinfo.ErrUnavailable) || errors.Is(err, podinfo.ErrDenied) || errors.Is(err, podinfo.ErrWrongNode) {
			level = slog.LevelWarn
		}
		a.log.Log(r.Context(), level, "lookup refused", "namespace", ns, "pod", pod, "uid", uid, "node", node,
			"reason", ae.Reason, "err", err)
		writeJSON(w, status, ae)
		return
	}
	a.log.Debug("lookup", "namespace", ns, "pod", pod, "uid", uid, "node", node, "duration", time.Since(start))
	writeJSON(w, http.StatusOK, info)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve serves the agent's Handler on l until ctx ends, then shuts the
// server down (answers under way may finish for a few seconds).
func (a *Agent) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      podinfo.AgentAPITimeout + 5*time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}
