package podinfo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The ipkeeper-agent protocol: HTTP/1.1 over a unix socket.
//
//	GET /v1/lookup?namespace=N&pod=P&uid=U&node=X
//
// answers 200 with an Info (pod and namespace only when pod is set), or an
// error status with an AgentError. GET /readyz answers 200 once the
// agent's caches are synced, 503 before.
const (
	// AgentLookupPath is the agent's lookup endpoint.
	AgentLookupPath = "/v1/lookup"
	// AgentReadyPath is the agent's readiness endpoint.
	AgentReadyPath = "/readyz"
)

// Errors of the agent path.
var (
	// ErrAgentUnreachable: nothing answered at the agent socket (no
	// socket, refused, timed out, or not a socket ipkeeper trusts).
	ErrAgentUnreachable = errors.New("the ipkeeper agent cannot be reached")
	// ErrAgentNotReady: the agent answers but its caches are not synced.
	ErrAgentNotReady = errors.New("the ipkeeper agent is not ready")
	// ErrWrongNode: the agent serves another node than the one asked
	// about (the plugin's node name and the agent's differ).
	ErrWrongNode = errors.New("the ipkeeper agent serves another node")
)

// Reasons of an AgentError, one per sentinel error the agent may answer.
const (
	ReasonPodNotFound  = "PodNotFound"
	ReasonNodeNotFound = "NodeNotFound"
	ReasonDenied       = "Denied"
	ReasonUnavailable  = "Unavailable"
	ReasonWrongNode    = "WrongNode"
	ReasonBadRequest   = "BadRequest"
)

// AgentError is the body of an agent's error answer.
type AgentError struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// reasons maps reasons to sentinels and HTTP statuses.
var reasons = []struct {
	reason string
	err    error
	status int
}{
	{ReasonPodNotFound, ErrPodNotFound, http.StatusNotFound},
	{ReasonNodeNotFound, ErrNodeNotFound, http.StatusNotFound},
	{ReasonDenied, ErrDenied, http.StatusForbidden},
	{ReasonWrongNode, ErrWrongNode, http.StatusMisdirectedRequest},
	{ReasonUnavailable, ErrUnavailable, http.StatusServiceUnavailable},
}

// AgentErrorOf returns the answer for err and its HTTP status; errors of
// no known sentinel are Unavailable (the client may try again).
func AgentErrorOf(err error) (AgentError, int) {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return AgentError{Reason: r.reason, Message: err.Error()}, r.status
		}
	}
	return AgentError{Reason: ReasonUnavailable, Message: err.Error()}, http.StatusServiceUnavailable
}

// Err is the error an answer stands for, wrapping its sentinel. The
// message is the agent's, which names the object.
func (e AgentError) Err(socket string) error {
	for _, r := range reasons {
		if e.Reason == r.reason {
			return fmt.Errorf("%w (ipkeeper agent at %s): %s", r.err, socket, strings.TrimPrefix(e.Message, r.err.Error()+": "))
		}
	}
	return fmt.Errorf("%w: ipkeeper agent at %s answered %s: %s", ErrUnavailable, socket, e.Reason, e.Message)
}

// Timeouts of the agent client: connecting is local and immediate when
// the agent runs, so a dial that takes longer means it does not; an
// answer may wait for the agent's own GET of the API (AgentAPITimeout).
const (
	agentDialTimeout = time.Second
	// AgentAPITimeout bounds the agent's live GETs of one lookup.
	AgentAPITimeout = 5 * time.Second
	agentTimeout    = AgentAPITimeout + 2*time.Second
)

// AgentClient asks a node's ipkeeper-agent over its unix socket, one
// connection per request. It speaks HTTP/1.1 on the connection itself
// rather than through net/http's Transport: in a new plugin process the
// Transport's first request (connection pool, reader and writer
// goroutines) costs a new process more than the whole request written on
// the connection (docs/BENCHMARKS.md, "Plugin process costs").
type AgentClient struct {
	socket string
}

// NewAgentClient returns a client of the agent listening at socket.
func NewAgentClient(socket string) *AgentClient {
	return &AgentClient{socket: socket}
}

// Close releases nothing (each request closes its connection); it is
// here so that callers treat both clients alike.
func (a *AgentClient) Close() {}

// Socket is the agent socket's path.
func (a *AgentClient) Socket() string { return a.socket }

// Lookup asks the agent for the pod namespace/pod (with UID uid when not
// empty; "" pod asks for none), its namespace and the node, as
// Client.Lookup reads them. An agent that cannot be reached is
// ErrAgentUnreachable; its refusals wrap the sentinel of their reason.
func (a *AgentClient) Lookup(ctx context.Context, namespace, pod, uid, node string) (*Info, error) {
	q := url.Values{"node": {node}}
	if pod != "" {
		q.Set("namespace", namespace)
		q.Set("pod", pod)
		if uid != "" {
			q.Set("uid", uid)
		}
	}
	var info Info
	if err := a.get(ctx, AgentLookupPath+"?"+q.Encode(), &info); err != nil {
		return nil, err
	}
	if info.Node == nil || pod != "" && (info.Pod == nil || info.Namespace == nil) {
		return nil, fmt.Errorf("%w: ipkeeper agent at %s: incomplete answer", ErrUnavailable, a.socket)
	}
	return &info, nil
}

// Ready returns nil when the agent answers and its caches are synced,
// ErrAgentUnreachable or ErrAgentNotReady otherwise.
func (a *AgentClient) Ready(ctx context.Context) error {
	err := a.get(ctx, AgentReadyPath, nil)
	if err != nil && !errors.Is(err, ErrAgentUnreachable) {
		return fmt.Errorf("%w: %w", ErrAgentNotReady, err)
	}
	return err
}

// get GETs path from the agent into dst (nil: the status alone counts).
func (a *AgentClient) get(ctx context.Context, path string, dst any) error {
	return a.do(ctx, "GET", path, nil, agentTimeout, dst)
}

// do sends one request (a JSON body when body is not nil) and decodes a
// 200 answer into dst; timeout bounds the whole exchange.
func (a *AgentClient) do(ctx context.Context, method, path string, body []byte, timeout time.Duration, dst any) error {
	if err := checkSocket(a.socket); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAgentUnreachable, a.socket, err)
	}
	dctx, cancel := context.WithTimeout(ctx, agentDialTimeout)
	conn, err := (&net.Dialer{}).DialContext(dctx, "unix", a.socket)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAgentUnreachable, a.socket, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: ipkeeper-agent\r\nUser-Agent: ipkeeper-cni\r\nConnection: close\r\n", method, path)
	if body != nil {
		head += fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	if _, err := conn.Write(append([]byte(head+"\r\n"), body...)); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAgentUnreachable, a.socket, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("%w: %s: reading the answer: %w", ErrAgentUnreachable, a.socket, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("%w: %s: reading the answer: %w", ErrAgentUnreachable, a.socket, err)
	}
	if len(answer) > maxBody {
		return fmt.Errorf("%w: ipkeeper agent at %s: the answer is larger than %d bytes", ErrUnavailable, a.socket, maxBody)
	}
	if resp.StatusCode != http.StatusOK {
		var e AgentError
		if json.Unmarshal(answer, &e) != nil || e.Reason == "" {
			e = AgentError{Reason: fmt.Sprint(resp.StatusCode), Message: strings.TrimSpace(string(answer[:min(len(answer), 200)]))}
		}
		return e.Err(a.socket)
	}
	if dst == nil {
		return nil
	}
	if err := json.Unmarshal(answer, dst); err != nil {
		return fmt.Errorf("%w: ipkeeper agent at %s: undecodable answer: %w", ErrUnavailable, a.socket, err)
	}
	return nil
}
