package firstlayout

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// MaxHintFileBytes bounds what FileHints reads: a larger file is no hint
// (the allocation reads the store instead), and a larger hint is not
// written.
const MaxHintFileBytes = 8 << 20

// FileHints keeps one small file per node under Dir, for plugin processes
// that live for one call and take turns under a node lock. Writes are
// atomic renames without fsync: a lost or torn hint is only a hint.
//
// Dir must be a directory only root or the caller can change
// (datastore.Open prepares it so). Reading never follows a symbolic link,
// never blocks on a FIFO or device, takes only a regular file the caller
// owns, and stops at MaxHintFileBytes; anything else is no hint.
type FileHints struct {
	// Dir holds the files; it is created (0700) when missing.
	Dir string
}

func (c FileHints) path(node string) string {
	return filepath.Join(c.Dir, "hint-"+strings.ReplaceAll(node, string(filepath.Separator), "_")+".json")
}

// Load implements HintCache.
func (c FileHints) Load(node string) (Hint, bool) {
	b, ok := readHintFile(c.path(node))
	if !ok {
		return Hint{}, false
	}
	var h Hint
	if json.Unmarshal(b, &h) != nil {
		return Hint{}, false
	}
	return h, true
}

// readHintFile reads path if it is a regular file the caller owns of at
// most MaxHintFileBytes, without following a link or waiting on a FIFO.
func readHintFile(path string) ([]byte, bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|hintOpenFlags, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !ownedByCaller(fi) || fi.Size() > MaxHintFileBytes {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxHintFileBytes+1))
	if err != nil || len(b) > MaxHintFileBytes {
		return nil, false
	}
	return b, true
}

// Store implements HintCache.
func (c FileHints) Store(node string, h Hint) {
	b, err := json.Marshal(h)
	if err != nil || len(b) > MaxHintFileBytes || os.MkdirAll(c.Dir, 0o700) != nil {
		return
	}
	// CreateTemp makes a new file (O_EXCL, 0600) and the rename replaces
	// whatever is at the path, a planted link included, without following
	// it.
	tmp, err := os.CreateTemp(c.Dir, ".hint-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), c.path(node)) != nil {
		_ = os.Remove(tmp.Name())
	}
}

// Forget implements HintCache.
func (c FileHints) Forget(node string) { _ = os.Remove(c.path(node)) }
