package plugin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// The time of one call is shared between the node's agent and what stands
// in for it. Asking the agent gets at most agentCallMax and at most half
// of what is left of the call: an agent that accepts connections but
// never answers (stopped, deadlocked) costs a pod start that much, and
// the fallback (KubeBinary, or the API server read directly) keeps the
// other half. Connecting is bounded on its own by the agent client (one
// second: the socket is local).
const agentCallMax = 15 * time.Second

// agentContext returns ctx bounded by the agent's share of the time left
// before ctx's deadline.
func agentContext(ctx context.Context) (context.Context, context.CancelFunc) {
	budget := agentCallMax
	if d, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(d)/2)
	}
	return context.WithTimeout(ctx, budget)
}

// Variables by which a plugin process that hands a verb to KubeBinary
// tells it what the call already spent: the wall-clock deadline of the
// call (its watchdog's), so that the whole call, both processes, ends
// within the one timeout the runtime sees; and, when the hand-off is the
// fallback from the node's agent, why the agent did not serve the verb, so
// that KubeBinary does not ask it again.
const (
	deadlineEnv  = "IPKEEPER_DEADLINE"
	agentDownEnv = "IPKEEPER_AGENT_UNREACHABLE"
)

// handover is what a hand-off passes to KubeBinary.
type handover struct {
	// end is the call's deadline; zero passes none.
	end time.Time
	// agentErr is the agent's failure; nil when it was not asked.
	agentErr error
}

// environ returns env with the hand-off's variables set (and earlier
// values of them removed).
func (h handover) environ(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if strings.HasPrefix(kv, deadlineEnv+"=") || strings.HasPrefix(kv, agentDownEnv+"=") {
			continue
		}
		out = append(out, kv)
	}
	if !h.end.IsZero() {
		out = append(out, deadlineEnv+"="+strconv.FormatInt(h.end.UnixNano(), 10))
	}
	if h.agentErr != nil {
		// One line: the value is only ever logged.
		out = append(out, agentDownEnv+"="+strings.Join(strings.Fields(h.agentErr.Error()), " "))
	}
	return out
}

// errDeadlineEnv: deadlineEnv is set but is no deadline.
var errDeadlineEnv = errors.New("not a deadline")

// handedOver reads what a hand-off passed (see handover) from the
// environment: a zero end when none was passed. A deadlineEnv that is no
// Unix time in nanoseconds is an error.
func handedOver(getenv func(string) string) (handover, error) {
	var h handover
	if v := getenv(deadlineEnv); v != "" {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ns <= 0 {
			return handover{}, fmt.Errorf("%w: %s=%q: %w (Unix nanoseconds; the plugin sets it when it hands a verb to %s)",
				errArgs, deadlineEnv, v, errDeadlineEnv, KubeBinary)
		}
		h.end = time.Unix(0, ns)
	}
	if v := getenv(agentDownEnv); v != "" {
		h.agentErr = fmt.Errorf("%w (the plugin found before it handed the verb over): %s", podinfo.ErrAgentUnreachable, v)
	}
	return h, nil
}
