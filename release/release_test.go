package release

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/bloomgate/bloomgate/release/ociimage"
)

// root is the repository root, seen from this module.
const root = ".."

func releaseTag(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" || strings.HasPrefix(v, "v") || strings.Count(v, ".") != 2 {
		t.Fatalf("VERSION %q: want MAJOR.MINOR.PATCH", v)
	}
	return "v" + v
}

func gitOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// TestRelease runs make release for linux/amd64 (make release builds all
// four platforms the same way), then checks what it wrote: checksums, the
// SBOM, and the image, whose executable is taken out of its layer and run.
func TestRelease(t *testing.T) {
	tag := releaseTag(t)
	dist := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", root, "release", "DIST="+dist, "RELEASE_PLATFORMS=linux/amd64")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release (linux/amd64) took %v", time.Since(start).Round(time.Second))

	bin := "bloomgate-" + tag + "-linux-amd64"
	archive := "bloomgate-" + tag + ".oci.tar"
	sbom := bin + ".cdx.json"
	t.Run("checksums", func(t *testing.T) { checkSums(t, dist, []string{archive, sbom, bin}) })
	t.Run("sbom", func(t *testing.T) { checkSBOM(t, filepath.Join(dist, sbom), tag) })

	idx := openLayout(t, filepath.Join(dist, "image"), tag)
	t.Run("archive", func(t *testing.T) { checkArchive(t, filepath.Join(dist, archive), idx) })
	img, cf := platformImage(t, idx, "linux", "amd64")
	t.Run("config", func(t *testing.T) { checkConfig(t, cf, tag) })
	exe := extractBinary(t, img)
	t.Run("run", func(t *testing.T) { checkBinary(t, exe, tag) })
	t.Run("same", func(t *testing.T) {
		// The layer holds the executable make release built, and the same
		// inputs give the same image, digest for digest.
		if a, b := fileSum(t, exe), fileSum(t, filepath.Join(dist, bin)); a != b {
			t.Errorf("the image's /bloomgate (%s) is not %s (%s)", a, bin, b)
		}
		created, err := time.Parse(time.RFC3339, cf.Config.Labels[ociimage.LabelCreated])
		if err != nil {
			t.Fatal(err)
		}
		again, err := ociimage.Build(ociimage.Options{
			Version: tag, Revision: cf.Config.Labels[ociimage.LabelRevision], Source: cf.Config.Labels[ociimage.LabelSource],
			Licenses: cf.Config.Labels[ociimage.LabelLicenses], Name: "ghcr.io/bloomgate/bloomgate", Created: created,
			Binaries: map[string]string{"linux/amd64": filepath.Join(dist, bin)},
		})
		if err != nil {
			t.Fatal(err)
		}
		d1, _ := idx.Digest()
		d2, _ := again.Digest()
		if d1 != d2 {
			t.Errorf("rebuilding the image from the same executable and labels gives %s, make release wrote %s", d2, d1)
		}
	})
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkSums: SHA256SUMS lists every file given, in sha256sum -c's format,
// with the right sums.
func checkSums(t *testing.T, dist string, want []string) {
	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not `sum  name`", sc.Text())
		}
		if fileSum(t, filepath.Join(dist, name)) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
		got = append(got, name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("SHA256SUMS lists %q, want %q", got, want)
	}
}

// checkSBOM: a CycloneDX document naming bloomgate at the release and the
// modules linked into the executable (those of the nodev build: no
// embedded broker).
func checkSBOM(t *testing.T, path, tag string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Metadata    struct {
			Timestamp string `json:"timestamp"`
			Component struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion == "" {
		t.Errorf("bomFormat %q specVersion %q", bom.BOMFormat, bom.SpecVersion)
	}
	if c := bom.Metadata.Component; c.Name != "github.com/bloomgate/bloomgate" || c.Version != tag {
		t.Errorf("SBOM component %s %s, want github.com/bloomgate/bloomgate %s", c.Name, c.Version, tag)
	}
	names := map[string]bool{}
	for _, c := range bom.Components {
		names[c.Name] = true
	}
	for _, want := range []string{"github.com/segmentio/kafka-go", "golang.org/x/crypto/x509roots/fallback"} {
		if !names[want] {
			t.Errorf("SBOM lacks %s (%d components)", want, len(bom.Components))
		}
	}
	if names["github.com/twmb/franz-go/pkg/kfake"] {
		t.Error("SBOM lists kfake: it is not in the nodev build the release ships")
	}
}

// openLayout opens the OCI layout: index.json names one multi-platform
// index, tagged with the release.
func openLayout(t *testing.T, dir, tag string) v1.ImageIndex {
	t.Helper()
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json: %+v, want one OCI image index", im.Manifests)
	}
	d := im.Manifests[0]
	if d.Annotations[ociimage.RefName] != tag || d.Annotations[ociimage.ContainerdName] != "ghcr.io/bloomgate/bloomgate:"+tag {
		t.Errorf("index.json annotations %v, want the tag %s", d.Annotations, tag)
	}
	idx, err := top.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Annotations[ociimage.LabelVersion] != tag {
		t.Errorf("index annotations %v", m.Annotations)
	}
	return idx
}

// checkArchive: the oci-archive is a tar of the same layout.
func checkArchive(t *testing.T, path string, idx v1.ImageIndex) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("archive entry %q", h.Name)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("archive entry %q of type %c", h.Name, h.Typeflag)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("archive's index.json: %v %v", im, err)
	}
	want, _ := idx.Digest()
	if im.Manifests[0].Digest != want {
		t.Errorf("archive names %s, the layout %s", im.Manifests[0].Digest, want)
	}
	// Every blob is there and matches its digest.
	arch, err := top.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := validateIndex(arch); err != nil {
		t.Error(err)
	}
}

func validateIndex(idx v1.ImageIndex) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		ls, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range ls {
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, rc)
			rc.Close()
			if err != nil {
				return err
			}
			want, _ := l.Digest()
			if hex.EncodeToString(h.Sum(nil)) != want.Hex {
				return errors.New("layer " + want.String() + " does not match its digest")
			}
		}
	}
	return nil
}

func platformImage(t *testing.T, idx v1.ImageIndex, goos, arch string) (v1.Image, *v1.ConfigFile) {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var found *v1.Descriptor
	var platforms []string
	for i, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s without a platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %s: media type %s", d.Digest, d.MediaType)
		}
		if d.Platform.OS == goos && d.Platform.Architecture == arch {
			found = &m.Manifests[i]
		}
	}
	if found == nil {
		t.Fatalf("no %s/%s image in %v", goos, arch, platforms)
	}
	img, err := idx.Image(found.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != goos || cf.Architecture != arch {
		t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
	}
	return img, cf
}

// checkConfig: what deployments/Dockerfile's runtime stage says, and the
// OCI labels of the release.
func checkConfig(t *testing.T, cf *v1.ConfigFile, tag string) {
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/bloomgate"}) || !slices.Equal(c.Cmd, []string{"run"}) {
		t.Errorf("entrypoint %q cmd %q, want /bloomgate run", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["9464/tcp"]; !ok || len(c.ExposedPorts) != 1 {
		t.Errorf("exposed ports %v", c.ExposedPorts)
	}
	docker := dockerfileRuntime(t)
	if got := "ENTRYPOINT " + mustJSON(c.Entrypoint); !slices.Contains(docker, got) {
		t.Errorf("%s is not the Dockerfile's (%q)", got, docker)
	}
	if got := "CMD " + mustJSON(c.Cmd); !slices.Contains(docker, got) {
		t.Errorf("%s is not the Dockerfile's", got)
	}
	if !slices.Contains(docker, "USER "+c.User) || !slices.Contains(docker, "EXPOSE 9464") {
		t.Errorf("user %s / port: not the Dockerfile's %q", c.User, docker)
	}
	for _, e := range c.Env {
		if !slices.Contains(docker, "ENV "+e) {
			t.Errorf("env %s is not in the Dockerfile's runtime stage", e)
		}
	}
	if len(c.Env) != strings.Count(strings.Join(docker, "\n"), "ENV ") {
		t.Errorf("env %q: the Dockerfile sets a different number of variables", c.Env)
	}
	rev := gitOutput(t, "rev-parse", "HEAD")
	for k, want := range map[string]string{
		ociimage.LabelVersion: tag, ociimage.LabelSource: "https://github.com/bloomgate/bloomgate", ociimage.LabelLicenses: "Apache-2.0",
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	if got := c.Labels[ociimage.LabelRevision]; strings.TrimSuffix(got, "-dirty") != rev {
		t.Errorf("label revision %q, want %s", got, rev)
	}
	// Timestamps are the commit's, so that a rebuild is the same image.
	ct := gitOutput(t, "log", "-1", "--format=%cI")
	commit, err := time.Parse(time.RFC3339, ct)
	if err != nil {
		t.Fatal(err)
	}
	if !cf.Created.Time.Equal(commit) {
		t.Errorf("created %v, want the commit's %v", cf.Created.Time, commit)
	}
	if len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("%d layers, want 1", len(cf.RootFS.DiffIDs))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// dockerfileRuntime is the final stage of deployments/Dockerfile, one
// instruction a line, ENV split into one variable each.
func dockerfileRuntime(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deployments/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var ins []string
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "#") || (l == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		in := cur.String()
		cur.Reset()
		if strings.HasPrefix(in, "FROM ") {
			ins = nil // keep the last stage only
		}
		if rest, ok := strings.CutPrefix(in, "ENV "); ok {
			for _, kv := range strings.Fields(rest) {
				ins = append(ins, "ENV "+kv)
			}
			continue
		}
		ins = append(ins, in)
	}
	return ins
}

// extractBinary reads the image's one layer: /bloomgate, root-owned and
// not writable, and an empty /tmp; nothing else.
func extractBinary(t *testing.T, img v1.Image) string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 {
		t.Fatalf("%d layers, want 1", len(ls))
	}
	if mt, _ := ls[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s", mt)
	}
	rc, err := ls[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	exe := filepath.Join(t.TempDir(), "bloomgate")
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
		switch h.Name {
		case "bloomgate":
			if h.Mode&0o222 != 0 || h.Mode&0o111 == 0 {
				t.Errorf("/bloomgate mode %o: want executable, not writable", h.Mode)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(exe, b, 0o755); err != nil {
				t.Fatal(err)
			}
		case "tmp/":
			if h.Mode != 0o1777 {
				t.Errorf("/tmp mode %o", h.Mode)
			}
		}
	}
	if !slices.Equal(names, []string{"tmp/", "bloomgate"}) {
		t.Fatalf("layer holds %q, want tmp/ and bloomgate", names)
	}
	return exe
}

// checkBinary runs the image's executable (on this linux/amd64 machine):
// it reports the release, is the nodev build, and parses run's flags.
func checkBinary(t *testing.T, exe, tag string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "version", "--json").Output()
	if err != nil {
		t.Fatalf("version --json: %v", err)
	}
	var info struct {
		Version  string `json:"version"`
		Platform string `json:"platform"`
		Deps     []struct {
			Path string `json:"path"`
		} `json:"dependencies"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != tag || info.Platform != "linux/amd64" {
		t.Errorf("version --json: version %q platform %q, want %s linux/amd64", info.Version, info.Platform, tag)
	}
	if !slices.ContainsFunc(info.Deps, func(d struct {
		Path string `json:"path"`
	}) bool {
		return d.Path == "golang.org/x/crypto/x509roots/fallback"
	}) {
		t.Error("the executable does not embed the fallback CA roots; the image has no /etc/ssl/certs")
	}
	help, err := exec.CommandContext(ctx, exe, "run", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "--brokers") || !strings.Contains(string(help), "--checkpoint-url") {
		t.Errorf("run --help: %v\n%s", err, help)
	}
	dev, err := exec.CommandContext(ctx, exe, "dev").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(dev), "not in this executable") {
		t.Errorf("dev: %v %s; want the nodev build's refusal", err, dev)
	}
}
