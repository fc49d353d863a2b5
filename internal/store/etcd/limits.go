package etcd

import "github.com/ipkeeper/ipkeeper/internal/kv"

// maxRequestBytes is etcd's default --max-request-bytes (1.5 MiB).
const maxRequestBytes = 3 << 19

// requestReserve is left of maxRequestBytes for what the caller's keys and
// values do not count: the key prefix before every key and the request's
// framing.
const requestReserve = 64 << 10

var _ kv.Limiter = (*Store)(nil)

// Limits implements kv.Limiter with etcd's default server limits: at most
// 128 compares and 128 operations per transaction (--max-txn-ops), and a
// request of at most 1.5 MiB (--max-request-bytes), less a reserve for the
// key prefix and framing. Txn refuses more operations with ErrTooLarge.
func (s *Store) Limits() kv.Limits {
	n := maxRequestBytes - requestReserve
	return kv.Limits{MaxOps: maxOpsPerTxn, MaxValueBytes: n, MaxTxnBytes: n}
}
