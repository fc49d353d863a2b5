// Package flagenv sets a command's flags from environment variables, so
// that a DaemonSet can configure a binary by env as well as by args.
package flagenv

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Name is the variable that sets flag: prefix, then the flag's name in
// upper case with '-' as '_' ("node-name" with "IPKEEPER_AGENT_" is
// IPKEEPER_AGENT_NODE_NAME).
func Name(prefix, flag string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Set gives every flag of fs whose variable getenv returns non-empty that
// value. Call it before fs.Parse, so that flags given on the command line
// win. The first value a flag refuses is returned, naming the variable.
func Set(fs *pflag.FlagSet, prefix string, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		name := Name(prefix, f.Name)
		if v := getenv(name); v != "" && err == nil {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}
