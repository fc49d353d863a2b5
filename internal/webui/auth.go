package webui

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// tokenCookie carries the token for the page's own requests (EventSource
// cannot send an Authorization header); it is set by visiting ?token=.
const tokenCookie = "ipkeeper_ui_token"

// NeedsToken reports whether serving on listen (host:port) requires a
// bearer token: every host but a loopback address or "localhost" does —
// an empty host (all interfaces) and any other name or address.
func NeedsToken(listen string) (bool, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false, fmt.Errorf("listen address %q: want host:port (e.g. 127.0.0.1:7474): %v", listen, err)
	}
	if strings.EqualFold(host, "localhost") {
		return false, nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return true, nil // a name may resolve to anything
	}
	return !a.Unmap().IsLoopback(), nil
}

// isLoopbackHost reports whether a Host header names this machine's
// loopback (so a page served only on loopback cannot be read through a
// rebound DNS name).
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// guard enforces the map's access rules around next: read-only methods,
// the bearer token when one is required, loopback Host names otherwise,
// and headers that keep the page from being framed or sniffed.
func (u *UI) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			refuse(w, http.StatusMethodNotAllowed, "the address map is read-only")
			return
		}
		if !u.needToken {
			if !isLoopbackHost(r.Host) {
				refuse(w, http.StatusForbidden, "this address map serves loopback only; Host "+r.Host+" is not a loopback name")
				return
			}
			markAuthorized(r)
			next.ServeHTTP(w, r)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && !strings.HasPrefix(r.URL.Path, "/api/") {
			// A browser's first visit: keep the token in a cookie and drop
			// it from the address bar.
			if !u.authorized(r, t) {
				unauthorized(w)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int((12 * time.Hour).Seconds())})
			markAuthorized(r)
			w.Header().Set("Location", tokenRedirect(r.URL))
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		var tok string
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			tok = strings.TrimSpace(a[7:])
		} else if c, err := r.Cookie(tokenCookie); err == nil {
			tok = c.Value
		}
		if tok == "" || !u.authorized(r, tok) {
			unauthorized(w)
			return
		}
		markAuthorized(r)
		next.ServeHTTP(w, r)
	})
}

// tokenRedirect is where a visit with ?token= is sent once the token is in
// a cookie: the same page without the token. The Location is relative (the
// map may be mounted under a prefix) and always a path in the same
// directory: "./" and the last segment of the path, escaped, so that no
// segment ("\\host", "//host", "https:host") can name another origin.
func tokenRedirect(u *url.URL) string {
	loc := "./"
	if i := strings.LastIndexByte(u.Path, '/'); i >= 0 && i < len(u.Path)-1 {
		loc += url.PathEscape(u.Path[i+1:])
	}
	q := u.Query()
	q.Del("token")
	if len(q) > 0 {
		loc += "?" + q.Encode()
	}
	return loc
}

func (u *UI) authorized(r *http.Request, tok string) bool {
	if u.opts.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(u.opts.Token)) == 1 {
		return true
	}
	if u.opts.Authenticate != nil {
		ok, err := u.opts.Authenticate(r.Context(), tok)
		if err != nil {
			u.opts.Log.Warn("address map: authenticating a token failed", "error", err)
		}
		return ok && err == nil
	}
	return false
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="ipkeeper address map"`)
	refuse(w, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>, or open the page once with ?token=<token>)")
}

// refuse answers a request the guard does not let through and closes its
// connection: a client without a token gets one answer per connection.
func refuse(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Connection", "close")
	writeError(w, code, msg)
}
