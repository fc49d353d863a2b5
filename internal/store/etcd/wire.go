package etcd

import (
	"encoding/base64"
	"strconv"
)

// The requests and answers of the unary calls (gRPC, grpcwire.go): keys
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

// The JSON shapes of the gateway's watch stream (watch.go): bytes are
// base64, int64 are decimal strings, and fields at their zero value are
// omitted.

type header struct {
	Revision string `json:"revision"`
}

type keyValue struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	ModRevision string `json:"mod_revision"`
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func unb64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func atoi(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
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
