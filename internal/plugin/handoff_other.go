//go:build !linux

package plugin

import "fmt"

// execWithStdin is Linux-only (memfd_create); elsewhere the kubernetes
// datastore needs KubeBinary to be run directly.
func execWithStdin(path string, _ []byte, _ []string) error {
	return fmt.Errorf("%w: run %s directly on this system", errNoKubeBinary, path)
}
