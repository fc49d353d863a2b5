package etcd

// The requests and answers of the unary calls (grpcwire.go): keys
// and values as they are, revisions as numbers.

type rangeRequest struct {
	Key, RangeEnd   string
	Limit, Revision int64
	Serializable    bool
}

type putRequest struct {
	Key   string
	Value []byte
}

type deleteRequest struct {
	Key string
}

type requestOp struct {
	RequestRange       *rangeRequest
	RequestPut         *putRequest
	RequestDeleteRange *deleteRequest
}

// compare requires a key's mod_revision to equal ModRevision (0: the key
// is absent) or, ByValue, its value to equal Value.
type compare struct {
	Key         string
	ModRevision int64
	ByValue     bool
	Value       []byte
}

type txnRequest struct {
	Compare []compare
	Success []requestOp
	Failure []requestOp
}

type rawKV struct {
	Key, Value  []byte
	ModRevision int64
}

type rangeResponse struct {
	Revision int64 // of the header
	KVs      []rawKV
	More     bool
}

type responseOp struct {
	ResponseRange *rangeResponse
}

type txnResponse struct {
	Revision  int64 // of the header
	Succeeded bool
	Responses []responseOp
}

// prefixEnd is the range end covering every key that starts with p: p with
// its last byte below 0xff incremented and what follows dropped. It is
// "\x00" (every key) when p is all 0xff bytes or empty.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}
