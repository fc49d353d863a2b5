package calico

import (
	"context"
	"fmt"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
)

// ReadEtcd reads Calico's IPAM state (every key under Prefix) straight
// from Calico's etcd, in one read at one revision. cfg says how to reach
// the cluster (endpoints, TLS files, timeouts); its Prefix is ignored.
// It only reads.
//
// It goes through ipkeeper's etcd client, which speaks etcd's v3 JSON API
// (served by every etcd since 3.4): no gRPC client is linked. For an older
// etcd, save the keys with `etcdctl get --prefix /calico/ipam/v2/` and
// import the file instead.
func ReadEtcd(ctx context.Context, cfg etcd.Config) ([]KV, error) {
	cfg.Prefix = strings.TrimSuffix(Prefix, "/")
	st, err := etcd.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	es, err := st.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("read %s from Calico's etcd: %w", Prefix, err)
	}
	out := make([]KV, 0, len(es))
	for _, e := range es {
		out = append(out, KV{Key: e.Key, Value: e.Value})
	}
	return out, nil
}
