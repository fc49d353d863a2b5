package ctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/importer"
)

// TestImportWhereaboutsDeepDocument: one document of deeply nested lists
// (126 KB, as kubectl could never print an IPPool) is refused with an
// error naming the limit before anything is decoded, and the store is
// not created; a whereabouts export as kubectl prints it still imports.
func TestImportWhereaboutsDeepDocument(t *testing.T) {
	h := newHarness(t)
	deep := filepath.Join(h.tmp, "deep.yaml")
	// Seven lists 9 000 deep: within the YAML decoder's own limit of
	// 10 000, and seconds of its time.
	deepList := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	doc := "apiVersion: v1\nkind: List\nitems:\n- [" + strings.Repeat(deepList+", ", 6) + deepList + "]\n"
	if err := os.WriteFile(deep, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	h.fails(ExitError, []string{"input 1, line 4", fmt.Sprintf("more than %d levels deep", importer.MaxNesting), "limit"},
		"import", "whereabouts", "--file", deep)
	if es, err := os.ReadDir(h.dir); err != nil || len(es) != 0 {
		t.Fatalf("the store directory holds %v (%v) after the refused import, want nothing", es, err)
	}
	out := h.ok("import", "whereabouts", "--file", "../importer/testdata/whereabouts-ippools.yaml")
	if !strings.Contains(out, "5 addresses taken") {
		t.Fatalf("importing the whereabouts export:\n%s", out)
	}
}
