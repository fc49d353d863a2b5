// Package etcd is the "etcd" datastore: a kv.Store in an existing etcd v3
// cluster, so that every node of a cluster allocates from the same state.
//
// It calls etcd's gRPC services (KV.Range, KV.Txn and, for the web UI's
// address map, the Watch stream) over net/http's HTTP/2 with keep-alive
// connections, encoding the few messages it uses by hand (grpcwire.go,
// watchwire.go), and deliberately does not link etcd's gRPC client: the
// plugin binary is executed once per CNI call and the gRPC/protobuf
// package initialisation alone would cost more than a whole local ADD.
// The watch, which only long-running processes use, goes the same way
// rather than through clientv3 because that is the smaller change: a
// stream needs one more message encoder and decoder and a frame reader on
// top of what the unary calls have, and keeps their endpoints, failover
// and TLS checks as they are; clientv3 would bring the gRPC runtime into
// ipkeeperctl and the controller (which link none), a second TLS and
// endpoint set-up to keep equal to this one, and a reconnect loop of its
// own, hidden behind the one the map already has.
// etcd's JSON gateway is not used: it decodes JSON and then base64 before
// the same gRPC call, and with TLS it dials etcd's gRPC port with the
// server certificate as a client certificate.
//
// Every key is stored under the configured prefix plus "/". A value's
// Version is its etcd mod_revision. Txn is one etcd transaction whose
// compares check the mod_revision of every condition's key (0: absent).
// Get of several keys is one transaction of range requests (split into
// chunks read at one pinned revision when there are many), and List is a
// paginated range read at one revision, so both are consistent snapshots;
// GetWithPrefix sends the first page of a prefix's range in the
// transaction of the keys, read at its revision.
//
// Failures to reach a member fail over to the next endpoint and are retried
// with jittered backoff until the request timeout; what remains wraps
// store.ErrUnavailable. A transaction whose answer was lost after it may have
// reached etcd (a member killed mid-request, a dropped connection) is
// resolved before Txn returns, even when the caller's context has ended:
// it is sent again and, when that fails its compares, the keys are read
// back to see whether the lost attempt applied; a failed compare is never
// taken at its word after a lost answer. Values written by the
// allocator are unique (they name the handle), which makes the read-back
// exact; when a key the transaction wrote was changed again meanwhile, Txn
// reports a conflict and the caller's re-read finds the truth (the
// allocator re-reads the handle, whose key only its owner writes).
//
// Limits reports etcd's default transaction limits (128 operations, 1.5
// MiB), and Txn refuses a larger transaction with ErrTooLarge before
// sending it.
//
// Errors name endpoints (host:port) but never keys, values or credentials.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Defaults for Config fields left zero.
const (
	DefaultPrefix         = "/ipkeeper"
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 10 * time.Second
)

// maxOpsPerTxn keeps transactions under etcd's default --max-txn-ops (128).
const maxOpsPerTxn = 128

// pageSize is how many keys one List range request returns. etcd counts
// the keys from a page's start to the range's end for every page, so a
// list costs the keys times the pages: large pages keep a list of a
// whole cluster (565 000 keys at 5 000 nodes) linear in practice
// (docs/BENCHMARKS.md, the address map's first load). A variable for the
// paging test.
var pageSize int64 = 20000

// Sentinel errors of the package.
var (
	// ErrConfig means the configuration cannot work (bad endpoint, TLS
	// files that cannot be read).
	ErrConfig = errors.New("etcd: invalid configuration")
	// ErrTLS means a TLS handshake failed: an untrusted server certificate
	// or a client certificate the server refused.
	ErrTLS = errors.New("etcd: TLS failure")
	// ErrTooLarge means a transaction has more operations than etcd accepts.
	ErrTooLarge = errors.New("etcd: transaction too large")
	// ErrDenied means etcd refused the request: its authentication is on
	// and the user (the client certificate's common name) lacks a role
	// permitting the keys, or is not known.
	ErrDenied = errors.New("etcd: access denied")
	// errCompacted means a pinned read revision was compacted away.
	errCompacted = errors.New("etcd: revision compacted")
)

// Config says how to reach the cluster.
type Config struct {
	// Endpoints are client URLs (http, https, unix, unixs) or host:port.
	Endpoints []string
	// CAFile verifies the servers; CertFile and KeyFile are the client
	// certificate. With any of them set, host:port endpoints use https.
	CAFile, CertFile, KeyFile string
	// Prefix is put before every key (default DefaultPrefix).
	Prefix string
	// DialTimeout bounds connecting (and the TLS handshake) to a member.
	DialTimeout time.Duration
	// RequestTimeout bounds one operation including its retries and
	// failovers.
	RequestTimeout time.Duration
	// Serializable makes reads local to the member asked (faster, maybe
	// stale). Writes are compare-and-swap guarded either way, so a stale
	// read costs a retry, never a duplicate.
	Serializable bool
}

// Store is the etcd-backed kv.Store. It is safe for concurrent use.
type Store struct {
	c        *client
	prefix   string
	serial   bool
	closeMu  sync.Mutex
	isClosed bool
}

var _ kv.Store = (*Store)(nil)

// Open returns a store for cfg. It reads the TLS files but does not
// contact etcd: the first operation does.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	tlsc, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := newClient(cfg, tlsc)
	if err != nil {
		return nil, err
	}
	return &Store{c: c, prefix: strings.TrimRight(cfg.Prefix, "/") + "/", serial: cfg.Serializable}, nil
}

// Close drops the store's connections. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if !s.isClosed {
		s.isClosed = true
		s.c.close()
	}
	return nil
}

func (s *Store) full(key string) string { return s.prefix + key }

// entry is a read key-value as an entry under key.
func entry(key string, e rawKV) (kv.KeyValue, error) {
	if e.ModRevision <= 0 {
		return kv.KeyValue{}, errors.New("etcd: undecodable mod_revision")
	}
	v := e.Value
	if v == nil {
		v = []byte{}
	}
	return kv.KeyValue{Key: key, Value: v, Version: e.ModRevision}, nil
}

// Get returns one entry per key, read at one revision.
func (s *Store) Get(ctx context.Context, keys ...string) ([]kv.KeyValue, error) {
	return s.get(ctx, s.serial, keys)
}

func (s *Store) get(ctx context.Context, serial bool, keys []string) ([]kv.KeyValue, error) {
	out := make([]kv.KeyValue, len(keys))
	if len(keys) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return out, nil
	}
	for attempt := 0; ; attempt++ {
		_, err := s.getAt(ctx, serial, keys, out, nil)
		if errors.Is(err, errCompacted) && attempt < 3 {
			continue
		}
		return out, err
	}
}

var _ kv.PrefixGetter = (*Store)(nil)

// GetWithPrefix implements kv.PrefixGetter: one transaction reads the
// range of the prefix with the keys (more transactions and range requests
// read at its revision when there are many keys, or many under the
// prefix).
func (s *Store) GetWithPrefix(ctx context.Context, keys []string, prefix string) (entries, under []kv.KeyValue, err error) {
	entries = make([]kv.KeyValue, len(keys))
	for attempt := 0; ; attempt++ {
		under, err = s.getAt(ctx, s.serial, keys, entries, &prefix)
		if errors.Is(err, errCompacted) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		return entries, under, nil
	}
}

// getAt reads keys into out at one revision, in transactions of range
// requests. With prefix set, the first transaction also reads the range
// of every key under *prefix, which getAt returns (its further pages, if
// any, read at the same revision).
func (s *Store) getAt(ctx context.Context, serial bool, keys []string, out []kv.KeyValue, prefix *string) ([]kv.KeyValue, error) {
	var rev int64
	var under *rangeResponse
	for start := 0; start == 0 || start < len(keys); {
		var ops []requestOp
		if start == 0 && prefix != nil {
			full := s.full(*prefix)
			ops = append(ops, requestOp{RequestRange: &rangeRequest{Key: full, RangeEnd: prefixEnd(full), Limit: pageSize, Serializable: serial}})
		}
		chunk := keys[start:min(start+maxOpsPerTxn-len(ops), len(keys))]
		first := len(ops)
		for _, k := range chunk {
			ops = append(ops, requestOp{RequestRange: &rangeRequest{Key: s.full(k), Revision: rev, Serializable: serial}})
		}
		var resp txnResponse
		if err := s.c.call(ctx, methodTxn, txnRequest{Success: ops}, &resp); err != nil {
			return nil, readErr(err)
		}
		if len(resp.Responses) != len(ops) {
			return nil, fmt.Errorf("etcd: %d answers to %d reads", len(resp.Responses), len(ops))
		}
		if rev == 0 {
			rev = resp.Revision
		}
		if first == 1 {
			if under = resp.Responses[0].ResponseRange; under == nil {
				under = &rangeResponse{}
			}
		}
		for i, k := range chunk {
			out[start+i] = kv.KeyValue{Key: k}
			rr := resp.Responses[first+i].ResponseRange
			if rr == nil || len(rr.KVs) == 0 {
				continue
			}
			e, err := entry(k, rr.KVs[0])
			if err != nil {
				return nil, err
			}
			out[start+i] = e
		}
		start += len(chunk)
		if start == 0 {
			break // no keys: the prefix's range alone
		}
	}
	if prefix == nil {
		return nil, nil
	}
	return s.pages(ctx, serial, s.full(*prefix), rev, *under)
}

// readErr drops the may-have-been-sent detail, which only matters to writes.
func readErr(err error) error {
	var se *sendError
	if errors.As(err, &se) {
		return se.err
	}
	return err
}

// List returns every entry under prefix, sorted by key, read at one
// revision in pages.
func (s *Store) List(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	for attempt := 0; ; attempt++ {
		out, err := s.list(ctx, prefix)
		if errors.Is(err, errCompacted) && attempt < 3 {
			continue
		}
		return out, err
	}
}

// ListAt returns every entry under prefix read at revision rev (0: the
// current one) and the revision it was read at, so that several prefixes
// can be read at one revision and watched from it. A rev compacted away
// fails with ErrWatchCompacted.
func (s *Store) ListAt(ctx context.Context, prefix string, rev int64) ([]kv.KeyValue, int64, error) {
	full := s.full(prefix)
	req := rangeRequest{Key: full, RangeEnd: prefixEnd(full), Limit: pageSize, Revision: rev, Serializable: s.serial}
	var resp rangeResponse
	err := s.c.call(ctx, methodRange, req, &resp)
	if err == nil {
		if rev == 0 {
			rev = resp.Revision
		}
		var out []kv.KeyValue
		if out, err = s.pages(ctx, s.serial, full, rev, resp); err == nil {
			return out, rev, nil
		}
	}
	if err = readErr(err); errors.Is(err, errCompacted) {
		return nil, 0, fmt.Errorf("%w: %w", ErrWatchCompacted, err)
	}
	return nil, 0, err
}

func (s *Store) list(ctx context.Context, prefix string) ([]kv.KeyValue, error) {
	full := s.full(prefix)
	req := rangeRequest{Key: full, RangeEnd: prefixEnd(full), Limit: pageSize, Serializable: s.serial}
	var resp rangeResponse
	if err := s.c.call(ctx, methodRange, req, &resp); err != nil {
		return nil, readErr(err)
	}
	return s.pages(ctx, s.serial, full, resp.Revision, resp)
}

// pages returns the entries under full (a prefix with the store's), from
// first, the first page of their range read at revision rev, and the
// pages after it, read at rev too.
func (s *Store) pages(ctx context.Context, serial bool, full string, rev int64, first rangeResponse) ([]kv.KeyValue, error) {
	end := prefixEnd(full)
	resp := first
	var out []kv.KeyValue
	for {
		for _, e := range resp.KVs {
			if !strings.HasPrefix(string(e.Key), full) {
				return nil, errors.New("etcd: range returned a key outside the prefix")
			}
			kvp, err := entry(string(e.Key)[len(s.prefix):], e)
			if err != nil {
				return nil, err
			}
			out = append(out, kvp)
		}
		if !resp.More || len(resp.KVs) == 0 {
			break
		}
		key := string(resp.KVs[len(resp.KVs)-1].Key) + "\x00"
		req := rangeRequest{Key: key, RangeEnd: end, Limit: pageSize, Revision: rev, Serializable: serial}
		resp = rangeResponse{}
		if err := s.c.call(ctx, methodRange, req, &resp); err != nil {
			return nil, readErr(err)
		}
	}
	// etcd sorts bytewise already; keep the contract explicit.
	if !sort.SliceIsSorted(out, func(i, j int) bool { return out[i].Key < out[j].Key }) {
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	}
	return out, nil
}
