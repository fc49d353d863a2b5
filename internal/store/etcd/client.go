package etcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/store"
)

// endpoint is one etcd member's client URL and the HTTP client that talks
// to it (its own keep-alive connection pool).
type endpoint struct {
	base string // scheme://host[:port], what requests are sent to
	name string // host:port or socket path, for messages
	// hc speaks HTTP/2 to etcd's gRPC service.
	hc *http.Client
	// early is a dial Connect started (connect.go).
	early early
}

// client sends gRPC requests to the endpoints, failing over to the next
// one when a member cannot be reached.
type client struct {
	eps            []*endpoint
	cur            atomic.Int32
	requestTimeout time.Duration
}

// sendError is a failed attempt, classified.
type sendError struct {
	err       error
	retryable bool // another attempt (maybe on another endpoint) may work
	sent      bool // the request may have reached etcd: a write may have applied
}

func (e *sendError) Error() string { return e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

func newClient(cfg Config, tlsc *tls.Config) (*client, error) {
	c := &client{requestTimeout: cfg.RequestTimeout}
	for i, raw := range cfg.Endpoints {
		ep, err := newEndpoint(raw, cfg.DialTimeout, tlsc)
		if err != nil {
			return nil, fmt.Errorf("%w: endpoint %d: %w", ErrConfig, i+1, err)
		}
		c.eps = append(c.eps, ep)
	}
	if len(c.eps) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrConfig)
	}
	c.cur.Store(int32(rand.N(len(c.eps))))
	return c, nil
}

func newEndpoint(raw string, dialTimeout time.Duration, tlsc *tls.Config) (*endpoint, error) {
	if !strings.Contains(raw, "://") {
		if tlsc != nil {
			raw = "https://" + raw
		} else {
			raw = "http://" + raw
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	if u.User != nil {
		return nil, errors.New("credentials in the URL are not supported")
	}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	ep := &endpoint{}
	var useTLS bool
	var dial func(ctx context.Context, network, addr string) (net.Conn, error)
	switch u.Scheme {
	case "http", "https":
		useTLS = u.Scheme == "https"
		ep.base = u.Scheme + "://" + u.Host
		ep.name = u.Host
		dial = dialer.DialContext
	case "unix", "unixs":
		useTLS = u.Scheme == "unixs"
		sock := u.Host + u.Path
		ep.name = sock
		ep.base = "http://localhost"
		if useTLS {
			ep.base = "https://localhost"
		}
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", sock)
		}
	default:
		return nil, fmt.Errorf("scheme %q is not supported", u.Scheme)
	}
	if useTLS && tlsc == nil {
		tlsc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	ep.early.dial = dial
	if useTLS {
		host := strings.TrimPrefix(ep.base, "https://")
		ep.early.addr = transportAddr("https", host)
		ep.early.dial = dialTLS(dial, tlsc, host, dialTimeout)
	} else {
		ep.early.addr = transportAddr("http", strings.TrimPrefix(ep.base, "http://"))
	}
	// gRPC: HTTP/2 only, negotiated by TLS or, in the clear, with prior
	// knowledge (as gRPC clients do; etcd tells the two apart by it).
	h2 := new(http.Protocols)
	if useTLS {
		h2.SetHTTP2(true)
	} else {
		h2.SetUnencryptedHTTP2(true)
	}
	tr := &http.Transport{
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: dialTimeout,
		DisableCompression:  true,
		Protocols:           h2,
	}
	if useTLS {
		// The connection comes with its handshake done (dialTLS), so
		// that Connect dials it whole.
		tr.DialTLSContext = ep.dialContext
	} else {
		tr.DialContext = ep.dialContext
	}
	ep.hc = &http.Client{Transport: tr}
	return ep, nil
}

// close drops idle connections.
func (c *client) close() {
	for _, ep := range c.eps {
		ep.dropEarly()
		ep.hc.CloseIdleConnections()
	}
}

// call sends one gRPC request (grpcwire.go), failing over between endpoints and
// retrying retryable failures until the request timeout (or ctx) ends.
// When a request may have reached etcd and no answer came back, the
// returned error is a *sendError with sent set, so a writer can find out
// whether it applied.
func (c *client) call(ctx context.Context, path string, in, out any) error {
	_, err := c.callResent(ctx, path, in, out)
	return err
}

// callResent is call that also reports, when an answer came back, whether
// an earlier attempt may have reached etcd without its answer arriving:
// for a write, the answer then describes a second application of the same
// request, and a failed compare in it may be the first one's doing.
func (c *client) callResent(ctx context.Context, path string, in, out any) (bool, error) {
	body, err := encodeRequest(in)
	if err != nil {
		return false, fmt.Errorf("etcd: encode request: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	wait := 10 * time.Millisecond
	var sent bool
	var last *sendError
	for attempt := 0; ; attempt++ {
		i := int(c.cur.Load()) % len(c.eps)
		ep := c.eps[i]
		serr := c.once(ctx, ep, path, body, out)
		if serr == nil {
			return sent, nil
		}
		// A TLS refusal (a certificate either side rejects) refuses every
		// connection of this client: an earlier attempt that seemed sent
		// (a write that broke as the server's alert arrived) never
		// reached etcd's KV service either.
		sent = sent || serr.sent
		last = serr
		if !serr.retryable {
			if sent && !errors.Is(serr.err, ErrTLS) {
				// An earlier attempt may have applied: keep that known.
				return sent, &sendError{err: serr.err, sent: true}
			}
			return sent, serr.err
		}
		// Move on to the next member; another caller may have already.
		c.cur.CompareAndSwap(int32(i), int32((i+1)%len(c.eps)))
		if attempt+1 >= len(c.eps) {
			d := wait/2 + rand.N(wait/2+1)
			wait = min(wait*2, 500*time.Millisecond)
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			detail := strings.TrimPrefix(last.err.Error(), store.ErrUnavailable.Error()+": ")
			err := fmt.Errorf("%w: %w (last error: %s)", store.ErrUnavailable, ctx.Err(), detail)
			return sent, &sendError{err: err, retryable: true, sent: sent}
		}
	}
}

// once makes one attempt against one endpoint.
func (c *client) once(ctx context.Context, ep *endpoint, path string, body []byte, out any) *sendError {
	attemptCtx, cancel := context.WithTimeout(ctx, max(c.requestTimeout/2, time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(attemptCtx, http.MethodPost, ep.base+path, bytes.NewReader(body))
	if err != nil {
		return &sendError{err: fmt.Errorf("etcd: build request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := ep.hc.Do(req)
	if err != nil {
		return classifyTransport(ep, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 512<<20))
	if err != nil {
		return &sendError{err: fmt.Errorf("%w: etcd %s: reading the response: %v", store.ErrUnavailable, ep.name, scrub(err)),
			retryable: true, sent: true}
	}
	if resp.StatusCode != http.StatusOK {
		return classifyStatus(ep, resp.StatusCode, 0, strings.TrimSpace(string(data[:min(len(data), 200)])))
	}
	// The status is in the trailers, or in the headers of an answer
	// without a message.
	code, msg, ok := grpcStatus(resp.Trailer)
	if !ok {
		code, msg, ok = grpcStatus(resp.Header)
	}
	switch {
	case !ok:
		return &sendError{err: fmt.Errorf("%w: etcd %s: an answer without a gRPC status", store.ErrUnavailable, ep.name), retryable: true, sent: true}
	case code != 0:
		return classifyStatus(ep, resp.StatusCode, code, msg)
	}
	if err := decodeResponse(data, out); err != nil {
		return &sendError{err: fmt.Errorf("etcd %s: undecodable response: %v", ep.name, err)}
	}
	return nil
}

// grpcStatus reads the gRPC status from h (trailers, or the headers of
// an answer without messages); ok is false when h holds none.
func grpcStatus(h http.Header) (code int, msg string, ok bool) {
	n, err := strconv.Atoi(h.Get("Grpc-Status"))
	if err != nil {
		return 0, "", false
	}
	msg = h.Get("Grpc-Message")
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return n, msg, true
}

// classifyTransport sorts a failed HTTP round trip: TLS trouble is
// permanent and reported plainly; a failed dial never reached etcd; any
// other failure may have.
func classifyTransport(ep *endpoint, err error) *sendError {
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var alert tls.AlertError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &verr), errors.As(err, &uerr), errors.As(err, &herr):
		return &sendError{err: fmt.Errorf("%w: etcd %s: the server certificate is not trusted (check caFile): %v", ErrTLS, ep.name, certReason(err))}
	case errors.As(err, &alert):
		return &sendError{err: fmt.Errorf("%w: etcd %s rejected the TLS handshake (check certFile/keyFile and that the server trusts their CA): %v", ErrTLS, ep.name, alert)}
	case errors.As(err, &rh):
		return &sendError{err: fmt.Errorf("%w: etcd %s did not answer TLS (is the endpoint http:// rather than https://?)", ErrTLS, ep.name)}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return &sendError{err: fmt.Errorf("%w: etcd %s rejected the TLS connection (check certFile/keyFile and that the server trusts their CA): %v", ErrTLS, ep.name, op.Err)}
	}
	notSent := errors.As(err, &op) && op.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED)
	return &sendError{err: fmt.Errorf("%w: etcd %s: %v", store.ErrUnavailable, ep.name, scrub(err)), retryable: true, sent: !notSent}
}

// certReason is the x509 reason without certificate contents.
func certReason(err error) string {
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	switch {
	case errors.As(err, &uerr):
		return "certificate signed by unknown authority"
	case errors.As(err, &herr):
		return "certificate is not valid for " + herr.Host
	}
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		return "verification failed: " + verr.Err.Error()
	}
	return "verification failed"
}

// scrub returns the innermost network error without the request URL.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// gRPC status codes.
const (
	codeInvalidArgument   = 3
	codeDeadlineExceeded  = 4
	codeResourceExhausted = 8
	codePermissionDenied  = 7
	codeOutOfRange        = 11
	codeUnavailable       = 14
	codeUnauthenticated   = 16
)

// classifyStatus turns a failed answer (a gRPC status other than OK, or
// an HTTP status other than 200) into an error: the cluster's transient
// states (no leader, timeouts, overload) are retryable and wrap
// store.ErrUnavailable.
func classifyStatus(ep *endpoint, status, code int, msg string) *sendError {
	if msg == "" {
		msg = http.StatusText(status)
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	switch {
	case code == codeUnavailable, code == codeDeadlineExceeded, code == codeResourceExhausted,
		status >= 500, status == http.StatusTooManyRequests:
		return &sendError{err: fmt.Errorf("%w: etcd %s: %s", store.ErrUnavailable, ep.name, msg), retryable: true, sent: true}
	case code == codeOutOfRange:
		return &sendError{err: fmt.Errorf("%w: etcd %s: %s", errCompacted, ep.name, msg)}
	case code == codePermissionDenied, code == codeUnauthenticated:
		return &sendError{err: fmt.Errorf("%w: etcd %s: %s", ErrDenied, ep.name, msg)}
	case code != 0:
		return &sendError{err: fmt.Errorf("etcd %s: gRPC status %d: %s", ep.name, code, msg)}
	default:
		return &sendError{err: fmt.Errorf("etcd %s: HTTP %d: %s", ep.name, status, msg)}
	}
}
