package install

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/ipkeeper/ipkeeper/internal/safefs"
)

// uninstall removes what install writes: the plugin and its sibling, the
// config list, the kubeconfig and the TLS directory. Pods still attached
// through ipkeeper need the plugin for their DEL, so this runs only when
// they are gone. A link or anything but a regular file in the place of
// one of these files (or in the TLS directory) is refused, and then
// nothing is removed.
func uninstall(o Options, log *slog.Logger) error {
	bin, err := openExisting("--cni-bin-dir", o.cniBinDir)
	if err != nil {
		return err
	}
	conf, err := openExisting("--cni-conf-dir", o.cniConfDir)
	if err != nil {
		return err
	}
	defer func() {
		for _, d := range []*safefs.Dir{bin, conf} {
			if d != nil {
				_ = d.Close()
			}
		}
	}()
	var files []entry
	if bin != nil {
		files = append(files, entry{bin, filepath.Base(o.plugin)}, entry{bin, KubeSibling})
	}
	if conf != nil {
		for _, n := range []string{o.conflistName, o.kubeconfigName} {
			if n != "" {
				files = append(files, entry{conf, n})
			}
		}
	}
	withTLS := conf != nil && o.tlsDir != ""
	for _, e := range files {
		if err := checkFile(e.dir, e.name); err != nil {
			return err
		}
	}
	if withTLS {
		if err := checkTLSDir(conf); err != nil {
			return fmt.Errorf("TLS dir: %w", err)
		}
	}
	var errs []error
	for _, e := range files {
		if err := e.dir.Remove(e.name); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("removed", "path", e.dir.Join(e.name))
	}
	if withTLS {
		if err := removeTLSDir(conf); err != nil {
			errs = append(errs, err)
		} else {
			log.Info("removed", "path", conf.Join(tlsDirName))
		}
	}
	return errors.Join(errs...)
}

// openExisting is openHostDir of a dir that may be missing (nil).
func openExisting(flag, path string) (*safefs.Dir, error) {
	d, err := openHostDir(flag, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return d, err
}

// entry is a file name in a host dir.
type entry struct {
	dir  *safefs.Dir
	name string
}

// removeTLSDir removes the TLS dir of conf and the regular files in it; a
// missing one is not an error.
func removeTLSDir(conf *safefs.Dir) error {
	found, err := eachTLSFile(conf, func(dir *safefs.Dir, name string) error {
		if err := dir.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil || !found {
		return err
	}
	return conf.RemoveDir(tlsDirName)
}
