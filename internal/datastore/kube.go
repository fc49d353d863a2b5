package datastore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// ErrKubernetesNotLinked means the binary cannot open a kubernetes
// datastore: the client library's package initialization costs a
// short-lived process several times its own start-up (docs/BENCHMARKS.md),
// so only binaries that import kubeopen carry it
// (the plugin hands such configs to its sibling ipkeeper-kube).
var ErrKubernetesNotLinked = errors.New("this binary does not include the kubernetes datastore")

// kubeOpen opens a Kubernetes datastore's client; nil until kubeopen is
// linked.
var kubeOpen func(ds config.Datastore, plugin bool) (store.Store, error)

// RegisterKubernetes installs the opener of kubernetes datastores; the
// package kubeopen calls it from its init. plugin tells a plugin call's
// open from a long-running process's (Options.Plugin).
func RegisterKubernetes(open func(ds config.Datastore, plugin bool) (store.Store, error)) {
	kubeOpen = open
}

// KubernetesLinked reports whether this binary can open a kubernetes
// datastore.
func KubernetesLinked() bool { return kubeOpen != nil }

// openKube opens the Kubernetes datastore; a plugin open holds the node
// lock until Close. The kubeconfig is loaded before the lock is taken, so
// a bad one creates nothing.
func openKube(ctx context.Context, ds config.Datastore, plugin bool) (store.Store, error) {
	if kubeOpen == nil {
		return nil, fmt.Errorf("%w (import internal/datastore/kubeopen)", ErrKubernetesNotLinked)
	}
	ks, err := kubeOpen(ds, plugin)
	if err != nil {
		return nil, err
	}
	if !plugin {
		return ks, nil
	}
	unlock, err := nodeLock(ctx, kubeLockName(ds), ds.RequestTimeout)
	if err != nil {
		_ = ks.Close()
		return nil, err
	}
	return &locked{Store: ks, unlock: unlock}, nil
}

// kubeLockName names the node lock of one Kubernetes datastore: the same
// kubeconfig path and partition always map to the same file, others to
// other files.
func kubeLockName(ds config.Datastore) string {
	path := ds.Kubeconfig
	if path != "" {
		if abs, err := filepath.Abs(path); err == nil {
			path = filepath.Clean(abs)
		}
	}
	sum := sha256.Sum256([]byte(path + "\x00" + ds.Prefix))
	return "kube-" + hex.EncodeToString(sum[:8]) + ".lock"
}
