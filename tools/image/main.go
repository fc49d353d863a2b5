// Command image builds ipkeeper's container image without a container
// daemon: the static (CGO_ENABLED=0) binaries in one layer under
// /usr/local/bin, written as an OCI image layout directory (and, with
// -tar, a tarball that `docker load` and `podman load` read). Push the
// layout with any OCI tool, e.g. `skopeo copy oci:DIR:TAG docker://REF`
// or `crane push DIR REF`.
//
//	go run ./tools/image -o bin/oci                 # builds the binaries
//	go run ./tools/image -bin DIR -o bin/oci        # takes them from DIR
//
// The build is reproducible: file times, the creation time and the layer
// compression are fixed, so the same binaries give the same digest. A
// dynamically linked binary is refused: the image has no libc.
//
// This is a build tool, not part of the product.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Binaries are the commands the image holds, by package directory name.
var Binaries = []string{"ipkeeper", "ipkeeper-kube", "ipkeeperctl", "ipkeeper-controller", "ipkeeper-install", "ipkeeper-agent"}

// Image layout facts the manifests in deploy/ rely on.
const (
	binDir     = "/usr/local/bin"
	entrypoint = binDir + "/ipkeeper-controller"
	// user is distroless' "nonroot"; the DaemonSet runs its installer as
	// root explicitly.
	user = "65532:65532"
)

func main() {
	var (
		out  = flag.String("o", "", "output directory for the OCI image layout (created; an existing layout there is replaced)")
		bin  = flag.String("bin", "", "directory holding the binaries already built (default: build them with go build, CGO_ENABLED=0)")
		tag  = flag.String("tag", "dev", "tag recorded in the layout's index (org.opencontainers.image.ref.name)")
		repo = flag.String("repo", "ipkeeper/ipkeeper", "repository name for the -tar tarball")
		tarF = flag.String("tar", "", "also write a docker-loadable tarball to this file")
		arch = flag.String("arch", runtime.GOARCH, "GOARCH of the image")
	)
	flag.Parse()
	if err := run(*out, *bin, *tag, *repo, *tarF, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(out, bin, tag, repo, tarFile, arch string) error {
	if out == "" {
		return errors.New("-o is required")
	}
	if bin == "" {
		tmp, err := os.MkdirTemp("", "ipkeeper-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := build(tmp, arch); err != nil {
			return err
		}
		bin = tmp
	}
	img, err := Image(bin, arch, tag)
	if err != nil {
		return err
	}
	if err := writeLayout(out, img, tag); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote OCI layout %s (%s:%s, manifest %s)\n", out, repo, tag, d)
	if tarFile != "" {
		ref, err := name.NewTag(repo + ":" + tag)
		if err != nil {
			return fmt.Errorf("-repo/-tag: %w", err)
		}
		if err := tarball.WriteToFile(tarFile, ref, img); err != nil {
			return err
		}
		fmt.Printf("wrote tarball %s\n", tarFile)
	}
	return nil
}

// build compiles every binary statically for linux/arch into dir.
func build(dir, arch string) error {
	for _, b := range Binaries {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, b), "./cmd/"+b)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %w", b, err)
		}
	}
	return nil
}

// goarchMachine is the ELF machine of each GOARCH the image may be built for.
var goarchMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
}

// CheckStatic returns an error unless path is an ELF executable for arch
// with no program interpreter (statically linked).
func CheckStatic(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (has PT_INTERP); build it with CGO_ENABLED=0", path)
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is not an executable (%v)", path, f.Type)
	}
	if m, ok := goarchMachine[arch]; ok && f.Machine != m {
		return fmt.Errorf("%s is for %v, not %s", path, f.Machine, arch)
	}
	return nil
}

// epoch is every timestamp in the image, for reproducible digests.
var epoch = time.Unix(0, 0).UTC()

// Image builds the image from the binaries in dir.
func Image(dir, arch, tag string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, b := range Binaries {
		src := filepath.Join(dir, b)
		if err := CheckStatic(src, arch); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(binDir, b)[1:], Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}

	cfg := &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config: v1.Config{
			Entrypoint: []string{entrypoint},
			User:       user,
			Env:        []string{"PATH=" + binDir},
			WorkingDir: "/",
			Labels: map[string]string{
				"org.opencontainers.image.title":   "ipkeeper",
				"org.opencontainers.image.source":  "https://github.com/ipkeeper/ipkeeper",
				"org.opencontainers.image.version": tag,
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "tools/image: static ipkeeper binaries in " + binDir},
	})
}

// writeLayout writes img as the only image of an OCI layout at dir,
// replacing a layout that is there; any other non-empty dir is refused.
func writeLayout(dir string, img v1.Image, tag string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("-o %s: not empty and not an OCI layout; refusing to replace it", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}
