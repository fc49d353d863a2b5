package datastore

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd"
)

// lockName names the node lock of one etcd datastore: the same cluster and
// prefix always map to the same file, other datastores to other files.
func lockName(cfg etcd.Config) string {
	eps := slices.Clone(cfg.Endpoints)
	slices.Sort(eps)
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = etcd.DefaultPrefix
	}
	sum := sha256.Sum256([]byte(strings.TrimRight(prefix, "/") + "\x00" + strings.Join(eps, "\x00")))
	return "etcd-" + hex.EncodeToString(sum[:8]) + ".lock"
}
