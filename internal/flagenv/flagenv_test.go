package flagenv_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/flagenv"
	"github.com/spf13/pflag"
)

func TestSet(t *testing.T) {
	env := map[string]string{"X_NODE_NAME": "from-env", "X_REFRESH": "5s", "X_OTHER": "ignored"}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	node := fs.String("node-name", "", "")
	refresh := fs.Duration("refresh", time.Second, "")
	if err := flagenv.Set(fs, "X_", func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--refresh=7s"}); err != nil {
		t.Fatal(err)
	}
	if *node != "from-env" || *refresh != 7*time.Second {
		t.Fatalf("node %q refresh %v: want the env's node and the command line's refresh", *node, *refresh)
	}
	env["X_REFRESH"] = "soon"
	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Duration("refresh", time.Second, "")
	if err := flagenv.Set(fs, "X_", func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), `X_REFRESH="soon"`) {
		t.Fatalf("bad value: %v, want an error naming X_REFRESH", err)
	}
}
