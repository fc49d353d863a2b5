package install

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/safefs"
)

// The installer runs as root with the host's CNI dirs mounted, which
// other programs can also write to. It never follows a symbolic link
// there: it works relative to each open dir (safefs), writes every file by
// renaming a new one over it, and refuses — before changing anything — a
// link, or anything but a regular file, where one of its files or the TLS
// dir goes. Its own inputs (the plugin binaries, the ConfigMap, the Secret
// and the token) are in its own container, where it follows the kubelet's
// links.

// openHostDir opens one of the host's CNI dirs given on the command line
// (flag names it in errors) with safefs.Open: the dir itself must be a
// directory, not a link, owned by root and writable by nobody else, and a
// link above it is followed only when root made it in a dir nobody else
// can write (or a sticky one, like /tmp): /var/run -> /run is fine. In the
// DaemonSet the dirs are mount points, so no link is on the way; on a host
// whose /etc/cni/net.d is itself a link, name the dir it points to.
func openHostDir(flag, path string) (*safefs.Dir, error) {
	d, err := safefs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return d, nil
}

// checkFile refuses an entry name of d that exists and is not a regular
// file: a link planted where the installer writes or removes a file.
func checkFile(d *safefs.Dir, name string) error {
	if _, err := d.StatFile(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// checkTLSDir refuses a TLS dir in conf that is a link or not a directory,
// or holds anything but regular files.
func checkTLSDir(conf *safefs.Dir) error {
	_, err := eachTLSFile(conf, func(dir *safefs.Dir, name string) error {
		_, err := dir.StatFile(name)
		return err
	})
	return err
}

// eachTLSFile calls f with the TLS dir of conf and each name in it; a
// missing dir is not an error (found is false then).
func eachTLSFile(conf *safefs.Dir, f func(dir *safefs.Dir, name string) error) (found bool, err error) {
	dir, err := conf.OpenDir(tlsDirName)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer dir.Close()
	names, err := dir.Names()
	if err != nil {
		return true, err
	}
	for _, n := range names {
		if err := f(dir, n); err != nil {
			return true, err
		}
	}
	return true, nil
}

// writeAtomic makes d/name hold data with mode (safefs.WriteFile). check,
// when not nil, can veto the new file before it replaces the old. A
// target that already holds data with mode is left alone; changed reports
// whether it was written.
func writeAtomic(d *safefs.Dir, name string, data []byte, mode os.FileMode, check func(*os.File) error) (changed bool, err error) {
	same, err := holds(d, name, mode, int64(len(data)), func(r io.Reader) (bool, error) {
		old, err := io.ReadAll(r)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", d.Join(name), err)
		}
		return bytes.Equal(old, data), nil
	})
	if err != nil || same {
		return false, err
	}
	return true, d.WriteFile(name, bytes.NewReader(data), mode, check)
}

// copyAtomic is writeAtomic with the content of the file src, streamed.
func copyAtomic(src string, d *safefs.Dir, name string, mode os.FileMode) (changed bool, err error) {
	f, err := os.Open(src)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	same, err := holds(d, name, mode, fi.Size(), func(r io.Reader) (bool, error) {
		want, err := digest(f)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", src, err)
		}
		have, err := digest(r)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", d.Join(name), err)
		}
		return have == want, nil
	})
	if err != nil || same {
		return false, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	return true, d.WriteFile(name, bufio.NewReader(f), mode, nil)
}

// holds reports whether d/name is a regular file of mode and size whose
// content same accepts. A missing file holds nothing; a link or anything
// but a regular file is refused.
func holds(d *safefs.Dir, name string, mode os.FileMode, size int64, same func(io.Reader) (bool, error)) (bool, error) {
	fi, err := d.StatFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode().Perm() != mode || fi.Size() != size {
		return false, nil
	}
	f, err := d.OpenFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	return same(io.LimitReader(f, size+1))
}

func digest(r io.Reader) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// procPath is a path that opens f itself, whatever happens to its name.
func procPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

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
