package kv

// Limits say how big one Txn of a store may be. A zero field means the
// store sets no limit of that kind.
type Limits struct {
	// MaxOps is the most conditions, and separately the most operations,
	// one Txn may carry; a Cond with a Value counts as two conditions.
	MaxOps int
	// MaxKeyBytes is the longest key the store accepts.
	MaxKeyBytes int
	// MaxValueBytes is the largest value one put may carry.
	MaxValueBytes int
	// MaxTxnBytes is the most bytes of keys and values one Txn may carry
	// in all, conditions and operations together.
	MaxTxnBytes int
}

// Limiter is implemented by stores whose transactions are bounded, so that
// a caller with a large change (removing a pool, an import) can split it
// into transactions the store accepts instead of learning the limit from
// a failure.
type Limiter interface {
	// Limits returns the store's transaction limits.
	Limits() Limits
}

// LimitsOf returns s's limits, or no limits when s does not say.
func LimitsOf(s Store) Limits {
	if l, ok := s.(Limiter); ok {
		return l.Limits()
	}
	return Limits{}
}

// Fits reports whether a transaction of conds and ops is within l.
func (l Limits) Fits(conds []Cond, ops []Op) bool {
	if l.MaxOps > 0 && (compares(conds) > l.MaxOps || len(ops) > l.MaxOps) {
		return false
	}
	for _, op := range ops {
		if l.MaxKeyBytes > 0 && len(op.Key) > l.MaxKeyBytes || l.MaxValueBytes > 0 && len(op.Value) > l.MaxValueBytes {
			return false
		}
	}
	return l.MaxTxnBytes <= 0 || TxnBytes(conds, ops) <= l.MaxTxnBytes
}

// compares counts conditions as MaxOps does.
func compares(conds []Cond) int {
	n := len(conds)
	for _, c := range conds {
		if c.Value != nil {
			n++
		}
	}
	return n
}

// TxnBytes is the size of a transaction's keys and values (a Cond with a
// Value names its key twice).
func TxnBytes(conds []Cond, ops []Op) int {
	n := 0
	for _, c := range conds {
		n += len(c.Key)
		if c.Value != nil {
			n += len(c.Key) + len(c.Value)
		}
	}
	for _, op := range ops {
		n += len(op.Key) + len(op.Value)
	}
	return n
}
