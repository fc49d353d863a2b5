package kubetest

import (
	"context"
	"fmt"
)

// Restart kills the API server and starts it again on the same etcd (a
// new port: URL, Config and Client change), waiting until it serves the
// system namespaces again. Its watch cache starts empty, as after any
// restart of an API server.
func (s *Server) Restart(ctx context.Context) error {
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
	if err := s.launch(s.bin, s.pki); err != nil {
		return fmt.Errorf("kubetest: restart: %w", err)
	}
	return s.waitNamespaces(ctx, "default", "kube-system")
}
