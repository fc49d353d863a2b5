package etcd

import (
	"encoding/base64"
	"strconv"
)

// The JSON shapes of etcd's v3 gRPC gateway (POST /v3/kv/range and
// /v3/kv/txn). Bytes are base64, int64 are decimal strings, and fields at
// their zero value (false, 0, empty) are omitted in responses.

type rangeRequest struct {
	Key          string `json:"key"`
	RangeEnd     string `json:"range_end,omitempty"`
	Limit        string `json:"limit,omitempty"`
	Revision     string `json:"revision,omitempty"`
	Serializable bool   `json:"serializable,omitempty"`
}

type putRequest struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type deleteRequest struct {
	Key string `json:"key"`
}

type requestOp struct {
	RequestRange       *rangeRequest  `json:"request_range,omitempty"`
	RequestPut         *putRequest    `json:"request_put,omitempty"`
	RequestDeleteRange *deleteRequest `json:"request_delete_range,omitempty"`
}

type compare struct {
	Result      string `json:"result"`
	Target      string `json:"target"`
	Key         string `json:"key"`
	ModRevision string `json:"mod_revision,omitempty"`
	Value       string `json:"value,omitempty"`
}

type txnRequest struct {
	Compare []compare   `json:"compare,omitempty"`
	Success []requestOp `json:"success,omitempty"`
	Failure []requestOp `json:"failure,omitempty"`
}

type header struct {
	Revision string `json:"revision"`
}

type keyValue struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	ModRevision string `json:"mod_revision"`
}

type rangeResponse struct {
	Header header     `json:"header"`
	KVs    []keyValue `json:"kvs"`
	More   bool       `json:"more"`
}

type responseOp struct {
	ResponseRange *rangeResponse `json:"response_range"`
}

type txnResponse struct {
	Header    header       `json:"header"`
	Succeeded bool         `json:"succeeded"`
	Responses []responseOp `json:"responses"`
}

// errorBody is what the gateway sends with a non-2xx status.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Error   string `json:"error"`
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func b64bytes(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

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
