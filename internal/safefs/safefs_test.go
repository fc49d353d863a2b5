//go:build linux

package safefs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// otherUID owns what the tests make untrusted.
const otherUID = 4321

func mkdir(t *testing.T, p string, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func write(t *testing.T, p, data string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func symlink(t *testing.T, target, p string) string {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func open(t *testing.T, p string) *Dir {
	t.Helper()
	d, err := Open(p)
	if err != nil {
		t.Fatalf("Open(%s): %v", p, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// wantErr checks that err wraps want and names path.
func wantErr(t *testing.T, err, want error, path string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want one wrapping %q", err, want)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, does not name %s", err, path)
	}
}

// victim is a directory that links point to: what a planted link must
// not reach. Its state is compared before and after with state.
func victim(t *testing.T) string {
	t.Helper()
	v := mkdir(t, filepath.Join(t.TempDir(), "victim"), 0o755)
	write(t, filepath.Join(v, "precious"), "precious data", 0o644)
	return v
}

// state describes a tree without following links: every path with its
// mode, and a file's content or a link's target.
func state(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			b.WriteString(" -> " + target)
		case fi.Mode().IsRegular():
			b.WriteString(" " + read(t, p))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestOpenPlainDirectory(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir)
	if d.Path() != dir {
		t.Fatalf("Path = %s, want %s", d.Path(), dir)
	}
	if d.Join("x") != filepath.Join(dir, "x") {
		t.Fatalf("Join = %s", d.Join("x"))
	}
	if _, err := Open("/"); err != nil {
		t.Fatalf("Open(/): %v", err)
	}
}

func TestOpenRefusesLastComponentLink(t *testing.T) {
	v := victim(t)
	link := symlink(t, v, filepath.Join(t.TempDir(), "conf"))
	_, err := Open(link)
	wantErr(t, err, ErrSymlink, link)
	if !strings.Contains(err.Error(), link+" is a symbolic link; refusing to follow it") {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenFollowsTrustedLinkAbove(t *testing.T) {
	top := t.TempDir()
	real := mkdir(t, filepath.Join(top, "real"), 0o755)
	mkdir(t, filepath.Join(real, "net.d"), 0o755)
	up := mkdir(t, filepath.Join(top, "up"), 0o755)
	// Absolute and relative (with ..) targets.
	symlink(t, real, filepath.Join(top, "abs"))
	symlink(t, "../real", filepath.Join(up, "rel"))
	for _, p := range []string{filepath.Join(top, "abs", "net.d"), filepath.Join(up, "rel", "net.d")} {
		d := open(t, p)
		if want := filepath.Join(real, "net.d"); d.Path() != want {
			t.Errorf("Open(%s).Path = %s, want %s", p, d.Path(), want)
		}
	}
}

func TestOpenRefusesUntrustedPaths(t *testing.T) {
	testenv.NeedRoot(t)
	top := t.TempDir()
	real := mkdir(t, filepath.Join(top, "real"), 0o755)
	mkdir(t, filepath.Join(real, "net.d"), 0o755)

	// A link above owned by another user.
	foreign := symlink(t, real, filepath.Join(top, "foreign"))
	if err := os.Lchown(foreign, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(foreign, "net.d"))
	wantErr(t, err, ErrUntrusted, foreign)

	// A directory above that anyone can write to, without the sticky bit.
	open777 := mkdir(t, filepath.Join(top, "open"), 0o777)
	mkdir(t, filepath.Join(open777, "net.d"), 0o755)
	_, err = Open(filepath.Join(open777, "net.d"))
	wantErr(t, err, ErrUntrusted, open777)

	// The same with the sticky bit, like /tmp: fine above, not as the last.
	sticky := mkdir(t, filepath.Join(top, "sticky"), 0o777|os.ModeSticky)
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(sticky, "net.d"), 0o755)
	if _, err := Open(filepath.Join(sticky, "net.d")); err != nil {
		t.Fatalf("a dir under a sticky one: %v", err)
	}
	_, err = Open(sticky)
	wantErr(t, err, ErrUntrusted, sticky)

	// The last directory writable by others, or owned by another user.
	last := mkdir(t, filepath.Join(real, "last"), 0o757)
	_, err = Open(last)
	wantErr(t, err, ErrUntrusted, last)
	owned := mkdir(t, filepath.Join(real, "owned"), 0o755)
	if err := os.Chown(owned, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	_, err = Open(owned)
	wantErr(t, err, ErrUntrusted, owned)
	_, err = Open(filepath.Join(owned, "x"))
	wantErr(t, err, ErrUntrusted, owned)
}

func TestOpenOtherRefusals(t *testing.T) {
	top := t.TempDir()
	_, err := Open(filepath.Join(top, "missing", "x"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	file := write(t, filepath.Join(top, "file"), "x", 0o644)
	_, err = Open(file)
	wantErr(t, err, ErrNotDir, file)
	loop := symlink(t, "loop", filepath.Join(top, "loop"))
	if _, err := Open(filepath.Join(loop, "x")); err == nil {
		t.Fatal("a link loop opened")
	}
	if _, err := Open(""); !errors.Is(err, ErrBadName) {
		t.Fatalf("empty path: %v", err)
	}
}

func TestOpenDirRefusesLink(t *testing.T) {
	v := victim(t)
	d := open(t, t.TempDir())
	link := symlink(t, v, d.Join("tls"))
	_, err := d.OpenDir("tls")
	wantErr(t, err, ErrSymlink, link)
	file := write(t, d.Join("file"), "x", 0o644)
	_, err = d.OpenDir("file")
	wantErr(t, err, ErrNotDir, file)
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := d.OpenDir(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("OpenDir(%q): %v", bad, err)
		}
	}
}

func TestOpenDirRefusesForeignOwner(t *testing.T) {
	testenv.NeedRoot(t)
	d := open(t, t.TempDir())
	p := mkdir(t, d.Join("tls"), 0o700)
	if err := os.Chown(p, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	_, err := d.OpenDir("tls")
	wantErr(t, err, ErrUntrusted, p)
}

func TestMkdirDoesNotFollow(t *testing.T) {
	v := victim(t)
	before := state(t, v)
	d := open(t, t.TempDir())
	symlink(t, filepath.Join(v, "new"), d.Join("dangling"))
	if err := d.Mkdir("dangling", 0o700); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Mkdir over a dangling link: %v", err)
	}
	if after := state(t, v); after != before {
		t.Fatalf("victim changed:\n%s", after)
	}
	if err := d.Mkdir("sub", 0o700); err != nil {
		t.Fatal(err)
	}
	sub, err := d.OpenDir("sub")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if fi, _ := sub.Stat(); fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Fatalf("sub: %v", fi.Mode())
	}
}

func TestOpenFileRefusesLinkAndFIFO(t *testing.T) {
	v := victim(t)
	d := open(t, t.TempDir())
	link := symlink(t, filepath.Join(v, "precious"), d.Join("key"))
	_, err := d.OpenFile("key")
	wantErr(t, err, ErrSymlink, link)

	fifo := d.Join("fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := d.OpenFile("fifo")
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		wantErr(t, err, ErrNotRegular, fifo)
	case <-time.After(20 * time.Second):
		t.Fatal("OpenFile blocked on a FIFO")
	}

	write(t, d.Join("ok"), "content", 0o600)
	f, err := d.OpenFile("ok")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "content" {
		t.Fatalf("read %q", b)
	}
}

func TestWriteFileReplacesAtomically(t *testing.T) {
	d := open(t, t.TempDir())
	if err := d.WriteFile("conf", strings.NewReader("one"), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	p := d.Join("conf")
	if fi, _ := os.Lstat(p); fi.Mode() != 0o644 || read(t, p) != "one" {
		t.Fatalf("conf: %v %q", fi.Mode(), read(t, p))
	}
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	before, _ := os.Lstat(p)
	if err := d.WriteFile("conf", strings.NewReader("two"), 0o600, nil); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Lstat(p)
	if os.SameFile(before, after) {
		t.Fatal("the file was written in place, not replaced")
	}
	if after.Mode() != 0o600 || read(t, p) != "two" {
		t.Fatalf("conf: %v %q", after.Mode(), read(t, p))
	}
	if b, _ := io.ReadAll(old); string(b) != "one" {
		t.Fatalf("a reader of the old file saw %q", b)
	}
	names, err := d.Names()
	if err != nil || len(names) != 1 || names[0] != "conf" {
		t.Fatalf("Names = %v, %v (a temporary file left?)", names, err)
	}
}

func TestWriteFileRefusesLink(t *testing.T) {
	v := victim(t)
	dir := t.TempDir()
	d := open(t, dir)
	target := filepath.Join(v, "precious")
	link := symlink(t, target, d.Join("kubeconfig"))
	dangling := symlink(t, filepath.Join(v, "new"), d.Join("dangling"))
	before, beforeDir := state(t, v), state(t, dir)
	err := d.WriteFile("kubeconfig", strings.NewReader("token"), 0o600, nil)
	wantErr(t, err, ErrSymlink, link)
	err = d.WriteFile("dangling", strings.NewReader("token"), 0o600, nil)
	wantErr(t, err, ErrSymlink, dangling)
	if after := state(t, v); after != before {
		t.Fatalf("victim changed:\n%s\nwas:\n%s", after, before)
	}
	if after := state(t, dir); after != beforeDir {
		t.Fatalf("dir changed:\n%s\nwas:\n%s", after, beforeDir)
	}
	sub := mkdir(t, d.Join("sub"), 0o755)
	err = d.WriteFile("sub", strings.NewReader("x"), 0o600, nil)
	wantErr(t, err, ErrNotRegular, sub)
	if err := d.WriteFile("a/b", strings.NewReader("x"), 0o600, nil); !errors.Is(err, ErrBadName) {
		t.Fatalf("WriteFile(a/b): %v", err)
	}
}

func TestWriteFileCheckVetoes(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir)
	write(t, d.Join("conf"), "good", 0o644)
	before := state(t, dir)
	veto := errors.New("bad config")
	var seen string
	err := d.WriteFile("conf", strings.NewReader("bad"), 0o644, func(f *os.File) error {
		b, err := os.ReadFile(f.Name())
		seen = string(b)
		if err != nil {
			return err
		}
		return veto
	})
	if !errors.Is(err, veto) {
		t.Fatalf("err = %v", err)
	}
	if seen != "bad" {
		t.Fatalf("check saw %q", seen)
	}
	if after := state(t, dir); after != before {
		t.Fatalf("dir changed:\n%s", after)
	}
}

// A Dir stays the directory it opened: replacing it by a link afterwards
// redirects nothing.
func TestDirOutlivesItsPath(t *testing.T) {
	v := victim(t)
	top := t.TempDir()
	conf := mkdir(t, filepath.Join(top, "conf"), 0o755)
	d := open(t, conf)
	if err := os.Rename(conf, filepath.Join(top, "moved")); err != nil {
		t.Fatal(err)
	}
	symlink(t, v, conf)
	before := state(t, v)
	if err := d.WriteFile("x", strings.NewReader("x"), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if after := state(t, v); after != before {
		t.Fatalf("victim changed:\n%s", after)
	}
	if read(t, filepath.Join(top, "moved", "x")) != "x" {
		t.Fatal("the file is not in the directory that was opened")
	}
}

func TestRemove(t *testing.T) {
	v := victim(t)
	dir := t.TempDir()
	d := open(t, dir)
	link := symlink(t, filepath.Join(v, "precious"), d.Join("plugin"))
	sub := mkdir(t, d.Join("sub"), 0o755)
	before, beforeDir := state(t, v), state(t, dir)
	wantErr(t, d.Remove("plugin"), ErrSymlink, link)
	wantErr(t, d.Remove("sub"), ErrNotRegular, sub)
	if err := d.Remove("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Remove(missing): %v", err)
	}
	if state(t, v) != before || state(t, dir) != beforeDir {
		t.Fatal("a refused Remove changed something")
	}
	write(t, d.Join("file"), "x", 0o644)
	if err := d.Remove("file"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d.Join("file")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file after Remove: %v", err)
	}
}

func TestRemoveDir(t *testing.T) {
	v := victim(t)
	d := open(t, t.TempDir())
	link := symlink(t, v, d.Join("tls"))
	wantErr(t, d.RemoveDir("tls"), ErrSymlink, link)
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("the link is gone: %v", err)
	}
	mkdir(t, d.Join("empty"), 0o700)
	if err := d.RemoveDir("empty"); err != nil {
		t.Fatal(err)
	}
}

func TestLstatAndNames(t *testing.T) {
	d := open(t, t.TempDir())
	write(t, d.Join("b"), "12345", 0o640)
	symlink(t, "b", d.Join("a"))
	mkdir(t, d.Join("c"), 0o700)
	names, err := d.Names()
	if err != nil || strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("Names = %v, %v", names, err)
	}
	fi, err := d.Lstat("a")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 || fi.Name() != "a" {
		t.Fatalf("Lstat(a) = %v, %v", fi, err)
	}
	fi, err = d.StatFile("b")
	if err != nil || fi.Mode() != 0o640 || fi.Size() != 5 || Owner(fi) != os.Geteuid() {
		t.Fatalf("StatFile(b) = %v, %v", fi, err)
	}
	if _, err := d.StatFile("a"); !errors.Is(err, ErrSymlink) {
		t.Fatalf("StatFile(a): %v", err)
	}
	if fi, err := d.Lstat("c"); err != nil || !fi.IsDir() {
		t.Fatalf("Lstat(c) = %v, %v", fi, err)
	}
	if fi.ModTime().IsZero() {
		t.Fatal("no ModTime")
	}
}
