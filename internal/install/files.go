package install

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// tmpPrefix names the installer's temporary files. They start with "." and
// end in ".tmp" so no CNI runtime takes one for a config.
const tmpPrefix = ".ipkeeper-install-"

// writeAtomic makes dir/name hold data with mode, by writing a temporary
// file in dir, fsyncing it and renaming it over the target (then fsyncing
// dir). check, when not nil, is called with the temporary file's path
// before the rename and can veto it. A target that already holds data with
// mode is left alone; changed reports whether it was written.
func writeAtomic(dir, name string, data []byte, mode os.FileMode, check func(tmp string) error) (changed bool, err error) {
	target := filepath.Join(dir, name)
	if fi, err := os.Lstat(target); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == mode {
		if old, err := os.ReadFile(target); err == nil && bytes.Equal(old, data) {
			return false, nil
		}
	}
	return true, replace(dir, name, mode, bytes.NewReader(data), check)
}

// copyAtomic is writeAtomic with the content of the file src, streamed.
func copyAtomic(src, dir, name string, mode os.FileMode) (changed bool, err error) {
	target := filepath.Join(dir, name)
	if fi, err := os.Lstat(target); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == mode {
		same, err := sameContent(src, target)
		if err != nil {
			return false, err
		}
		if same {
			return false, nil
		}
	}
	f, err := os.Open(src)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return true, replace(dir, name, mode, f, nil)
}

func replace(dir, name string, mode os.FileMode, r io.Reader, check func(string) error) error {
	tmp, err := os.CreateTemp(dir, tmpPrefix+name+"-*.tmp")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // a no-op after the rename
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if check != nil {
		if err := check(tmpName); err != nil {
			return err
		}
	}
	if err := os.Rename(tmpName, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// sameContent reports whether files a and b hold the same bytes.
func sameContent(a, b string) (bool, error) {
	ha, sa, err := digest(a)
	if err != nil {
		return false, err
	}
	hb, sb, err := digest(b)
	if err != nil {
		return false, nil
	}
	return sa == sb && ha == hb, nil
}

func digest(path string) ([sha256.Size]byte, int64, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return sum, 0, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, n, nil
}

// readDirFiles reads the regular files (following symlinks, as a Secret
// volume's files are) of dir whose names do not start with "." — a Secret
// or ConfigMap mount keeps its bookkeeping in dot-entries. A missing dir
// holds nothing.
func readDirFiles(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[e.Name()] = b
	}
	return out, nil
}

func joinHostPort(host, port string) string { return net.JoinHostPort(host, port) }

func baseName(p string) string { return filepath.Base(p) }
