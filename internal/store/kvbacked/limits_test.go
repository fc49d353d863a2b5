package kvbacked_test

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kv"
	"github.com/ipkeeper/ipkeeper/internal/store/kvbacked"
)

// TestLimitsPortable: the local file, whose transactions bbolt does not
// bound, takes etcd's limits of one write, so that the same writes
// succeed on both backends; those are the limits the etcd backend
// reports, and a pool's bound is the same on both.
func TestLimitsPortable(t *testing.T) {
	etcdKV := openEtcd(t)
	etcdLim := kv.LimitsOf(etcdKV)
	onEtcd := kvbacked.New(etcdKV).Limits()
	onLocal := kvbacked.New(openLocal(t)).Limits()
	if onLocal != onEtcd {
		t.Fatalf("limits on the local file %+v, on etcd %+v", onLocal, onEtcd)
	}
	if onEtcd.MaxWriteParts != etcdLim.MaxOps || onEtcd.MaxWriteBytes != etcdLim.MaxTxnBytes || onEtcd.MaxNodeBytes != 0 || onEtcd.MaxObjectBytes <= 0 {
		t.Fatalf("limits %+v; etcd's transactions are bounded by %+v", onEtcd, etcdLim)
	}
}
