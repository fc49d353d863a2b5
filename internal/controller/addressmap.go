package controller

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/storeview"
	"github.com/ipkeeper/ipkeeper/internal/webui"
)

// DefaultMapAddr is where ipkeeper-controller serves the address map
// unless --map-addr says otherwise: loopback only (reach it with kubectl
// port-forward).
const DefaultMapAddr = "127.0.0.1:7474"

// How long TokenReview answers are kept, and how many.
const (
	reviewTTL       = time.Minute
	reviewDeniedTTL = 10 * time.Second
	reviewCacheMax  = 4096
)

// mapConfig is what the address map needs from the controller.
type mapConfig struct {
	addr        string
	token       string
	tokenReview bool
	allow       []string
	ds          config.Datastore
	view        *storeview.View // shown instead of ds when set
	leaks       *MapLeaks
	client      kubernetes.Interface
	log         *slog.Logger
}

// serveMap starts the address map on mc.addr; stop ends it and waits.
func serveMap(ctx context.Context, mc mapConfig) (stop func(), err error) {
	if len(mc.allow) > 0 && !mc.tokenReview {
		return nil, fmt.Errorf("--map-allow %v needs --map-tokenreview", mc.allow)
	}
	// Every ServiceAccount of every pod is a user the API server
	// authenticates; the map shows every pod's name and address, so
	// TokenReview alone is not a reason to let a caller in.
	if mc.tokenReview && len(mc.allow) == 0 {
		return nil, errors.New("--map-tokenreview needs --map-allow naming the users or groups that may read the map (every ServiceAccount in the cluster is an authenticated user)")
	}
	opts := webui.Options{Datastore: mc.ds, View: mc.view, Leaks: mc.leaks, Listen: mc.addr, Token: mc.token, Log: mc.log}
	if mc.tokenReview {
		opts.Authenticate = newTokenReviewer(mc.client, mc.allow).authenticate
	}
	u, err := webui.New(opts)
	if err != nil {
		return nil, fmt.Errorf("--map-addr %s: %w (give --map-token, $%s or --map-tokenreview)", mc.addr, err, webui.TokenEnv)
	}
	l, err := net.Listen("tcp", mc.addr)
	if err != nil {
		return nil, fmt.Errorf("--map-addr: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { mc.leaks.Run(ctx, u) })
	wg.Go(func() {
		if err := u.Serve(ctx, l); err != nil {
			mc.log.Error("address map stopped", "err", err)
		}
	})
	auth := "none (loopback)"
	switch {
	case mc.tokenReview && mc.token != "":
		auth = "bearer token or Kubernetes TokenReview"
	case mc.tokenReview:
		auth = "Kubernetes TokenReview"
	case mc.token != "":
		auth = "bearer token"
	}
	mc.log.Info("serving the address map", "url", "http://"+l.Addr().String()+"/", "auth", auth)
	return func() { cancel(); wg.Wait() }, nil
}

// tokenReviewer approves bearer tokens the API server authenticates (a
// TokenReview), of a user or group in allow when allow is not empty. It
// keeps answers for a while, by the token's hash.
type tokenReviewer struct {
	client kubernetes.Interface
	allow  []string
	now    func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]review
}

type review struct {
	ok      bool
	expires time.Time
}

func newTokenReviewer(client kubernetes.Interface, allow []string) *tokenReviewer {
	return &tokenReviewer{client: client, allow: allow, now: time.Now, cache: map[[sha256.Size]byte]review{}}
}

// authenticate is a webui.Authenticator.
func (r *tokenReviewer) authenticate(ctx context.Context, token string) (bool, error) {
	key := sha256.Sum256([]byte(token))
	now := r.now()
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.ok, nil
	}
	tr, err := r.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("TokenReview: %w", err) // not cached: the next request asks again
	}
	st := tr.Status
	allowed := st.Authenticated && (len(r.allow) == 0 || slices.Contains(r.allow, st.User.Username) ||
		slices.ContainsFunc(st.User.Groups, func(g string) bool { return slices.Contains(r.allow, g) }))
	ttl := reviewTTL
	if !allowed {
		ttl = reviewDeniedTTL
	}
	r.mu.Lock()
	if len(r.cache) >= reviewCacheMax {
		clear(r.cache)
	}
	r.cache[key] = review{ok: allowed, expires: now.Add(ttl)}
	r.mu.Unlock()
	return allowed, nil
}
