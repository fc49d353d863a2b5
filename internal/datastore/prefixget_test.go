package datastore

import (
	"context"

	"github.com/ipkeeper/ipkeeper/internal/kv"
)

// GetWithPrefix counts as one get: it is one read (kv.PrefixGetter, which
// both kv backends implement).
func (c *kvCounter) GetWithPrefix(ctx context.Context, keys []string, prefix string) ([]kv.KeyValue, []kv.KeyValue, error) {
	c.count(&c.gets)
	return c.Store.(kv.PrefixGetter).GetWithPrefix(ctx, keys, prefix)
}
