// Package filetrust decides whether ipkeeper may use a file or directory
// that configuration, a flag or the environment names. The plugin runs as
// root: a path another user can change — the file, a symbolic link on the
// way to it, or any directory above it — would let that user choose what
// root writes (the datastore, a lock, a socket) or reads (a kubeconfig, and
// with it the API server and the credentials; etcd's TLS files).
//
// One set of rules holds for every path:
//   - every directory from "/" down and every symbolic link followed is
//     owned by root or the calling user (so root's kubelet-made links, and a
//     user's links to the user's own files, are followed);
//   - a directory may be writable by group or others only when it has the
//     sticky bit (like /tmp, where nobody else can rename or remove what
//     root or the caller owns) and is not itself the target;
//   - the target — a directory ipkeeper keeps files in, or a file it
//     reads — is owned by root or the caller and not writable by group or
//     others.
//
// There is one helper per job: PrepareDir for a directory ipkeeper keeps
// files in, OpenPrivateFile for a file it keeps there, Open and ReadFile
// for a file it reads (a kubeconfig, a certificate, a key, a token). Every
// refusal wraps ErrUnsafe and names the path it is about, the rule it
// breaks and the fix; nothing is created or changed by a refused call.
package filetrust

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
)

// ErrUnsafe wraps every refusal: the path is empty, holds a NUL byte, does
// not exist or is of the wrong type, or another user could change it.
var ErrUnsafe = errors.New("unusable or unsafe path")

// ReadFile reads the file at path (see Open) and refuses one larger than
// limit bytes. what names the file in messages ("kubeconfig").
func ReadFile(what, path string, limit int64) ([]byte, error) {
	f, err := Open(what, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrUnsafe, what, path, unwrapPath(err))
	}
	tooLarge := fmt.Errorf("%w: %s %s is larger than %d bytes", ErrUnsafe, what, path, limit)
	if fi.Size() > limit {
		return nil, tooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrUnsafe, what, path, unwrapPath(err))
	}
	if int64(len(b)) > limit {
		return nil, tooLarge
	}
	return b, nil
}

// checkPathString refuses paths no file system call can take.
func checkPathString(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: %s is empty; give an absolute path", ErrUnsafe, what)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w: %s %q contains a NUL byte", ErrUnsafe, what, p)
	}
	return nil
}

func splitPath(p string) []string {
	return strings.Split(filepath.ToSlash(p), "/")
}

// unwrapPath drops the *PathError's op and path, which messages already say.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
