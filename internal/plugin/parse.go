package plugin

import (
	"sync/atomic"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// parsed is one invocation's network config as parsed once: by Main
// before the verb runs, or by ipkeeper-agent's Validate. A config that
// does not parse keeps its error, which the verb reports where it
// would have read the config.
type parsed struct {
	conf *config.IPAM
	err  error
}

// parses counts parseConfig's calls (ParseCount).
var parses atomic.Uint64

// ParseCount returns how many network configs this process parsed through
// the package: every parse of a verb's config goes through parseConfig,
// and tests check with it that one verb parses its config once.
func ParseCount() uint64 { return parses.Load() }

// parseConfig parses a verb's network config; it is the package's only
// call of config.Parse.
func parseConfig(stdin []byte) (*config.IPAM, error) {
	parses.Add(1)
	return config.Parse(stdin)
}

// withConfig returns p carrying the verb's parsed config: p itself when
// Main or ServeContext handed one down, else a copy with stdin parsed now.
// Each verb calls it first and reads its config from p.parsed only.
func (p *Plugin) withConfig(stdin []byte) *Plugin {
	if p.parsed != nil {
		return p
	}
	q := *p
	conf, err := parseConfig(stdin)
	q.parsed = &parsed{conf: conf, err: err}
	return &q
}
