package plugin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// syncedPods is a PodSource whose caches are synced or not.
type syncedPods bool

func (syncedPods) Lookup(context.Context, string, string, string, string) (*podinfo.Info, error) {
	return nil, errors.New("not used")
}

func (s syncedPods) Ready() bool { return bool(s) }

// TestAgentStatusInProcess: STATUS run by the agent itself (Plugin.Pods)
// judges the agent by its own caches, never by its socket: not ready is
// an error wrapping ErrAgentNotReady unless a kubeconfig lets ADD read the
// API server directly; ready is nil. The socket here does not exist, so
// asking it would say unreachable instead.
func TestAgentStatusInProcess(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	p := &Plugin{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tc := range []struct {
		name       string
		ready      bool
		kubeconfig string
		want       error
	}{
		{"ready", true, "", nil},
		{"not ready", false, "", podinfo.ErrAgentNotReady},
		{"not ready, a kubeconfig to fall back on", false, "/k", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.Pods = syncedPods(tc.ready)
			err := p.agentStatus(t.Context(), &config.IPAM{AgentSocket: sock, Kubeconfig: tc.kubeconfig})
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("agentStatus: %v, want %v", err, tc.want)
			}
		})
	}
}
