package node

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pauseImage names the image built from ./test/node/pause: containerd's
// sandbox image and every test container's image (no registry is
// reachable; pods use imagePullPolicy Never).
const pauseImage = "ipkeeper.test/pause:1"

// packPause packs the static binary at binPath as /pause, the image's
// entrypoint, into a tarball at out that `ctr images import` reads.
func packPause(binPath, out string) error {
	data, err := os.ReadFile(binPath)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(data)),
		Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{"/pause"}}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(pauseImage)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}
