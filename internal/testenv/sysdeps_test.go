package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the module root: two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

// sysdeps reads the commands the Makefile's sysdeps target installs.
func sysdeps(t *testing.T, root string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?ms)^SYSDEPS := (.*?)[^\\]\n`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Makefile has no SYSDEPS := line")
	}
	out := map[string]bool{}
	for _, f := range strings.Fields(strings.ReplaceAll(string(m[0][len("SYSDEPS := "):]), "\\", " ")) {
		cmd, _, ok := strings.Cut(f, ":")
		if !ok {
			t.Fatalf("SYSDEPS entry %q is not COMMAND:PACKAGE", f)
		}
		out[filepath.Base(cmd)] = true
	}
	return out
}

// neededCommands finds every string literal passed to NeedCommands or
// exec.LookPath anywhere in the module's Go files.
func neededCommands(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil // a file being edited; the compiler reports it
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			var name string
			if ok {
				name = sel.Sel.Name
			} else if id, ok := call.Fun.(*ast.Ident); ok {
				name = id.Name
			}
			if name != "NeedCommands" && name != "LookPath" {
				return true
			}
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					rel, _ := filepath.Rel(root, path)
					out[s] = append(out[s], rel)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSysdepsCoverEveryNeededCommand holds `make test` to installing every
// system command a test looks up, so that a fresh machine's first
// `CI=true make test` does not fail for want of a package.
func TestSysdepsCoverEveryNeededCommand(t *testing.T) {
	root := repoRoot(t)
	have := sysdeps(t, root)
	// Commands that are not system packages: the Go toolchain, and
	// binaries the Makefile builds or go-installs itself.
	builtByMake := map[string]bool{"go": true, "ipkeeper": true, "ipkeeperctl": true, "ipkeeper-controller": true,
		"bridge": true, "loopback": true, "host-local": true, "cnitool": true, "staticcheck": true, "kube-apiserver": true}
	need := neededCommands(t, root)
	if len(need) == 0 {
		t.Fatal("found no NeedCommands/LookPath calls: the scan is broken")
	}
	for cmd, where := range need {
		if !have[cmd] && !builtByMake[cmd] {
			t.Errorf("%s is needed by %v but the Makefile's sysdeps does not install it", cmd, where)
		}
	}
}
