package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// Txn applies ops if every cond holds, as one etcd transaction.
func (s *Store) Txn(ctx context.Context, conds []kv.Cond, ops []kv.Op) error {
	_, err := s.TxnRevision(ctx, conds, ops)
	return err
}

// TxnRevision is Txn that returns the revision of the transaction, which
// etcd gives every key it wrote as its mod_revision; 0 when the answer was
// lost and the outcome had to be read back.
func (s *Store) TxnRevision(ctx context.Context, conds []kv.Cond, ops []kv.Op) (int64, error) {
	compares := len(conds)
	for _, c := range conds {
		if c.Value != nil {
			compares++ // a value condition is a second etcd compare
		}
	}
	if compares > maxOpsPerTxn || len(ops) > maxOpsPerTxn {
		return 0, fmt.Errorf("%w: %d compares and %d operations (etcd accepts %d)", ErrTooLarge, compares, len(ops), maxOpsPerTxn)
	}
	if n, limit := kv.TxnBytes(conds, ops), s.Limits().MaxTxnBytes; n > limit {
		// etcd would refuse it too, with an error that looks transient.
		return 0, fmt.Errorf("%w: %d bytes of keys and values (etcd accepts %d)", ErrTooLarge, n, limit)
	}
	req := txnRequest{}
	for _, c := range conds {
		req.Compare = append(req.Compare, compare{Key: s.full(c.Key), ModRevision: c.Version})
		if c.Value != nil {
			// etcd fails a value compare on a missing key.
			req.Compare = append(req.Compare, compare{Key: s.full(c.Key), ByValue: true, Value: c.Value})
		}
	}
	for _, op := range ops {
		if op.Delete {
			req.Success = append(req.Success, requestOp{RequestDeleteRange: &deleteRequest{Key: s.full(op.Key)}})
		} else {
			req.Success = append(req.Success, requestOp{RequestPut: &putRequest{Key: s.full(op.Key), Value: op.Value}})
		}
	}
	var resp txnResponse
	resent, err := s.c.callResent(ctx, methodTxn, req, &resp)
	var se *sendError
	if errors.As(err, &se) && se.sent && len(ops) > 0 {
		return 0, s.resolve(ctx, req, ops, se.err)
	}
	if err != nil {
		return 0, readErr(err)
	}
	if !resp.Succeeded {
		if resent && len(ops) > 0 {
			// An attempt whose answer was lost may have applied and so
			// failed this one's compares: the store tells.
			return 0, s.afterResend(ctx, ops)
		}
		return 0, store.ErrConflict
	}
	return resp.Revision, nil
}

// resolve finds out whether a transaction whose answer was lost applied.
// It sends it again until etcd answers (within one more request timeout,
// even when ctx has ended): success means the first attempt did not apply
// and this one did; a failed compare means either the first one applied or
// somebody else changed a key, which reading the written keys back tells
// apart.
func (s *Store) resolve(ctx context.Context, req txnRequest, ops []kv.Op, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.c.requestTimeout)
	defer cancel()
	for rctx.Err() == nil {
		var resp txnResponse
		err := s.c.call(rctx, methodTxn, req, &resp)
		if err != nil {
			var se *sendError
			if errors.As(err, &se) && se.retryable {
				continue
			}
			if errors.Is(err, ErrTLS) {
				// The server refuses this client's TLS credentials, so
				// it refused the connection the first attempt broke on
				// too (its alert lost to the connection's reset): that
				// attempt was never served.
				return readErr(err)
			}
			return fmt.Errorf("%w: outcome of a transaction unknown: %w", store.ErrUnavailable, readErr(err))
		}
		if resp.Succeeded {
			return nil
		}
		applied, err := s.applied(rctx, ops)
		if err != nil {
			break
		}
		if applied {
			return nil
		}
		return fmt.Errorf("%w (after a lost answer: %v)", store.ErrConflict, cause)
	}
	return fmt.Errorf("%w: outcome of a transaction unknown: %w", store.ErrUnavailable, cause)
}

// afterResend decides a transaction that was sent again after an answer
// was lost and then failed its compares: it applied when the store holds
// what it wrote, else it is a conflict.
func (s *Store) afterResend(ctx context.Context, ops []kv.Op) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.requestTimeout)
	defer cancel()
	applied, err := s.applied(rctx, ops)
	switch {
	case err != nil:
		return fmt.Errorf("%w: outcome of a transaction unknown: %w", store.ErrUnavailable, err)
	case applied:
		return nil
	}
	return fmt.Errorf("%w (after a lost answer)", store.ErrConflict)
}

// applied reports whether the store holds exactly what ops wrote: every
// put key with its value, every deleted key absent.
func (s *Store) applied(ctx context.Context, ops []kv.Op) (bool, error) {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	es, err := s.get(ctx, false, keys)
	if err != nil {
		return false, err
	}
	for i, op := range ops {
		switch {
		case op.Delete && es[i].Version != 0:
			return false, nil
		case !op.Delete && (es[i].Version == 0 || !bytes.Equal(es[i].Value, op.Value)):
			return false, nil
		}
	}
	return true, nil
}
