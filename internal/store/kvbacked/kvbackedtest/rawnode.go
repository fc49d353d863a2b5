package kvbackedtest

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// RawNode is a node object's parts as the kv layout stores them, each
// value written as given: for tests that store what no store.Store write
// makes (an undecodable or invalid object).
type RawNode struct {
	// Head is the head's value; "" writes no head.
	Head string
	// Blocks are the blocks' values (store.BlockSpec JSON) by block.
	Blocks map[store.BlockRef]string
	// Records are the handle records' values (store.FormatRecord) by
	// handle ID.
	Records map[string]string
}

// PutRawNode writes r as node's parts, over whatever is stored, in one
// transaction of kvs.
func PutRawNode(tb testing.TB, kvs kv.Store, node string, r RawNode) {
	tb.Helper()
	var ops []kv.Op
	if r.Head != "" {
		ops = append(ops, kv.Op{Key: kvbacked.NodeHeadKey(node), Value: []byte(r.Head)})
	}
	for ref, v := range r.Blocks {
		ops = append(ops, kv.Op{Key: kvbacked.NodeBlockKey(node, ref), Value: []byte(v)})
	}
	for id, v := range r.Records {
		ops = append(ops, kv.Op{Key: kvbacked.NodeRecordKey(node, id), Value: []byte(v)})
	}
	if err := kvs.Txn(tb.Context(), nil, ops); err != nil {
		tb.Fatal(err)
	}
}
