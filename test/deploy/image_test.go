package deploy

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// imageBinaries are the image's commands: what the manifests' containers
// run, the plugin the installer copies (--plugin) with its sibling for
// kubernetes datastores, and ipkeeperctl, which the README runs from the
// image for `ipkeeperctl import`.
var imageBinaries = []string{"ipkeeper", "ipkeeper-agent", "ipkeeper-controller", "ipkeeper-install", "ipkeeper-kube", "ipkeeperctl"}

// manifestPaths returns every image path the manifests execute or copy:
// each container's command[0], the installer's --plugin and the sibling
// it installs beside it (--plugin-kube, default ipkeeper-kube next to
// --plugin).
func manifestPaths(t *testing.T) []string {
	t.Helper()
	var ds appsv1.DaemonSet
	typed(t, "DaemonSet", "ipkeeper-node", &ds)
	var dep appsv1.Deployment
	typed(t, "Deployment", "ipkeeper-controller", &dep)
	var paths []string
	for _, c := range append(append([]corev1.Container(nil), ds.Spec.Template.Spec.Containers...), dep.Spec.Template.Spec.Containers...) {
		if len(c.Command) == 0 {
			t.Fatalf("container %s has no command: it would depend on the image's entrypoint", c.Name)
		}
		paths = append(paths, c.Command[0])
	}
	plugin, ok := flagValue(ds.Spec.Template.Spec.Containers[0].Args, "plugin")
	if !ok {
		t.Fatal("the DaemonSet does not name the plugin it installs (--plugin)")
	}
	kube, ok := flagValue(ds.Spec.Template.Spec.Containers[0].Args, "plugin-kube")
	if !ok {
		kube = path.Join(path.Dir(plugin), "ipkeeper-kube")
	}
	return append(paths, plugin, kube)
}

// buildImage builds the static binaries into a directory and runs
// tools/image on them; it returns the layout dir and the tarball path.
func buildImage(t *testing.T, bins string) (layoutDir, tarFile string) {
	t.Helper()
	tool := static(t, "tools/image")
	d := t.TempDir()
	layoutDir, tarFile = filepath.Join(d, "oci"), filepath.Join(d, "image.tar")
	out, err := exec.Command(tool, "-bin", bins, "-o", layoutDir, "-tar", tarFile, "-tag", "test").CombinedOutput()
	if err != nil {
		t.Fatalf("tools/image: %v\n%s", err, out)
	}
	return layoutDir, tarFile
}

// staticBinDir builds every image binary statically into one directory.
func staticBinDir(t *testing.T) string {
	t.Helper()
	needPackage(t, "cmd/ipkeeper-controller")
	d := t.TempDir()
	for _, b := range imageBinaries {
		src := static(t, "cmd/"+b)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestImageLayout builds the image without a container daemon, reads the
// OCI layout back, and checks it holds exactly what the manifests run, as
// static executables, with an entrypoint and user that make sense.
func TestImageLayout(t *testing.T) {
	bins := staticBinDir(t)
	dir, tarFile := buildImage(t, bins)

	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Fatalf("layout index %+v, want one image tagged test", im.Manifests)
	}
	img, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}

	// The files: exactly the binaries, mode 0755, owned by root.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{} // image path -> extracted copy
	extract := t.TempDir()
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeDir {
				continue
			}
			if h.Typeflag != tar.TypeReg {
				t.Errorf("image entry %s has type %c, want regular files only", h.Name, h.Typeflag)
				continue
			}
			if h.Mode&0o7777 != 0o755 || h.Uid != 0 || h.Gid != 0 {
				t.Errorf("image file %s: mode %o uid %d gid %d, want 0755 root:root", h.Name, h.Mode, h.Uid, h.Gid)
			}
			dst := filepath.Join(extract, filepath.Base(h.Name))
			f, err := os.Create(dst)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
			files["/"+h.Name] = dst
		}
		rc.Close()
	}
	var got []string
	for p := range files {
		got = append(got, p)
	}
	sort.Strings(got)
	var want []string
	for _, b := range imageBinaries {
		want = append(want, "/usr/local/bin/"+b)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("image files %v, want %v", got, want)
	}
	for _, p := range manifestPaths(t) {
		if _, ok := files[p]; !ok {
			t.Errorf("the manifests run %s, which the image does not hold", p)
		}
	}
	for p, f := range files {
		assertStatic(t, p, f)
		if !sameFile(t, f, filepath.Join(bins, filepath.Base(p))) {
			t.Errorf("image file %s differs from the binary built", p)
		}
	}

	// The config: linux/GOARCH, entrypoint a binary of the image, a
	// numeric non-root user that the controller's pod also runs as.
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("image platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	if len(cfg.Config.Entrypoint) != 1 || files[cfg.Config.Entrypoint[0]] == "" {
		t.Errorf("entrypoint %v is not one binary of the image", cfg.Config.Entrypoint)
	}
	var dep appsv1.Deployment
	typed(t, "Deployment", "ipkeeper-controller", &dep)
	sc := dep.Spec.Template.Spec.SecurityContext
	if cfg.Config.User != "65532:65532" || sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("image user %q (controller pod runs as %v): want the numeric non-root 65532:65532 for both", cfg.Config.User, sc)
	}

	// Reproducible: the same binaries give the same image.
	d1, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir2, _ := buildImage(t, bins)
	p2, err := layout.FromPath(dir2)
	if err != nil {
		t.Fatal(err)
	}
	idx2, _ := p2.ImageIndex()
	im2, err := idx2.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im2.Manifests[0].Digest != d1 {
		t.Errorf("a second build gave %s, the first %s: not reproducible", im2.Manifests[0].Digest, d1)
	}

	// The tarball holds the same image (config and layers).
	timg, err := tarball.ImageFromPath(tarFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cn1, _ := img.ConfigName()
	cn2, err := timg.ConfigName()
	if err != nil || cn1 != cn2 {
		t.Errorf("tarball config %s (%v), layout config %s", cn2, err, cn1)
	}
}

// assertStatic fails unless path (the image's p) is an ELF executable
// with no program interpreter: the image has no libc or loader.
func assertStatic(t *testing.T, p, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s is not an ELF binary: %v", p, err)
		return
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (PT_INTERP)", p)
		}
	}
}

// TestImageRefusesDynamicBinary: a binary built with cgo (dynamically
// linked to libc) is refused, since the image has no libc.
func TestImageRefusesDynamicBinary(t *testing.T) {
	d := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(d, "ipkeeper"), "./cmd/ipkeeper")
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with cgo: %v\n%s", err, out)
	}
	f, err := elf.Open(filepath.Join(d, "ipkeeper"))
	if err != nil {
		t.Fatal(err)
	}
	dynamic := false
	for _, p := range f.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}
	f.Close()
	if !dynamic {
		t.Fatal("a cgo build of ipkeeper came out static; this test needs a dynamic binary")
	}
	out, err := exec.Command(static(t, "tools/image"), "-bin", d, "-o", filepath.Join(t.TempDir(), "oci")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dynamically linked") {
		t.Fatalf("tools/image on a dynamic binary: %v\n%s", err, out)
	}
}

// TestDockerfileMatchesImage: deploy/Dockerfile (for docker users; no
// daemon here to build it) builds the same binaries statically into the
// same place, with the same entrypoint and user as tools/image.
func TestDockerfileMatchesImage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var built []string
	have := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.Join(strings.Fields(sc.Text()), " ")
		switch {
		case strings.HasPrefix(line, "RUN go build"):
			for _, f := range strings.Fields(line) {
				if c, ok := strings.CutPrefix(f, "./cmd/"); ok {
					built = append(built, c)
				}
			}
		case line == "ENV CGO_ENABLED=0", line == "COPY --from=build /out/ /usr/local/bin/",
			line == "USER 65532:65532", line == `ENTRYPOINT ["/usr/local/bin/ipkeeper-controller"]`:
			have[line] = true
		}
	}
	sort.Strings(built)
	if !slices.Equal(built, imageBinaries) {
		t.Errorf("Dockerfile builds %v, the image holds %v", built, imageBinaries)
	}
	if len(have) != 4 {
		t.Errorf("Dockerfile lacks one of CGO_ENABLED=0, the copy to /usr/local/bin, USER 65532:65532, the controller entrypoint (has %v)", have)
	}
}
