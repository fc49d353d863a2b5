package firstlayout_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The previous version's allocator is test support: no package of a
// command imports it, directly or through another package.
func TestNotLinkedIntoBinaries(t *testing.T) {
	const self = "github.com/ipkeeper/ipkeeper/internal/store/kvbacked/firstlayout"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/ipkeeper/ipkeeper/cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps of the commands named only %v", deps)
	}
	for _, d := range deps {
		if d == self {
			t.Fatalf("a command links %s; it is test support only", self)
		}
	}
}
