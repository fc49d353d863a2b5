package etcd

// IsWriteTxn reports whether a gRPC request frame is a transaction that
// puts or deletes (for the lost-answer proxy of the tests).
func IsWriteTxn(frame []byte) bool {
	if len(frame) < 5 {
		return false
	}
	write := false
	_ = eachField(frame[5:], func(f field) error {
		if f.num != 2 || f.wire != wireBytes {
			return nil
		}
		return eachField(f.data, func(g field) error {
			if g.num == 2 || g.num == 3 {
				write = true
			}
			return nil
		})
	})
	return write
}

// SetPageSize makes List read n keys per range request until the test
// ends.
func SetPageSize(t interface{ Cleanup(func()) }, n int64) {
	old := pageSize
	pageSize = n
	t.Cleanup(func() { pageSize = old })
}
