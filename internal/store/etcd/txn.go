package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/kv"
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
	if len(conds) > maxOpsPerTxn || len(ops) > maxOpsPerTxn {
		return 0, fmt.Errorf("%w: %d conditions and %d operations (etcd accepts %d)", ErrTooLarge, len(conds), len(ops), maxOpsPerTxn)
	}
	req := txnRequest{}
	for _, c := range conds {
		req.Compare = append(req.Compare, compare{Result: "EQUAL", Target: "MOD", Key: b64(s.full(c.Key)), ModRevision: itoa(c.Version)})
	}
	for _, op := range ops {
		if op.Delete {
			req.Success = append(req.Success, requestOp{RequestDeleteRange: &deleteRequest{Key: b64(s.full(op.Key))}})
		} else {
			req.Success = append(req.Success, requestOp{RequestPut: &putRequest{Key: b64(s.full(op.Key)), Value: b64bytes(op.Value)}})
		}
	}
	var resp txnResponse
	err := s.c.call(ctx, "/v3/kv/txn", req, &resp)
	var se *sendError
	if errors.As(err, &se) && se.sent && len(ops) > 0 {
		return 0, s.resolve(ctx, req, ops, se.err)
	}
	if err != nil {
		return 0, readErr(err)
	}
	if !resp.Succeeded {
		return 0, kv.ErrConflict
	}
	rev, err := atoi(resp.Header.Revision)
	if err != nil {
		return 0, nil // applied; the revision is only a hint
	}
	return rev, nil
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
		err := s.c.call(rctx, "/v3/kv/txn", req, &resp)
		if err != nil {
			var se *sendError
			if errors.As(err, &se) && se.retryable {
				continue
			}
			return fmt.Errorf("%w: outcome of a transaction unknown: %w", kv.ErrUnavailable, readErr(err))
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
		return fmt.Errorf("%w (after a lost answer: %v)", kv.ErrConflict, cause)
	}
	return fmt.Errorf("%w: outcome of a transaction unknown: %w", kv.ErrUnavailable, cause)
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
