// Package ociimage builds bloomgate's container image without a container
// engine: one layer per platform holding the static executable, on no base
// (FROM scratch), assembled into a multi-platform OCI index with
// go-containerregistry and written as an OCI image layout and as a tar of
// that layout (an "oci-archive", what skopeo, crane and docker load read).
//
// The image is what deployments/Dockerfile describes, less the distroless
// base: the executable at /bloomgate, entrypoint /bloomgate with the
// argument run, user 65532:65532 (numeric: there is no /etc/passwd, and
// none is needed), BLOOMGATE_METRICS_ADDR=:9464 and BLOOMGATE_LOG_FORMAT=json,
// port 9464. The only other entry is an empty /tmp (mode 1777) for runs
// without a mounted one; the root filesystem can be read-only. CA
// certificates are not in the image: the executable embeds Mozilla's roots
// (golang.org/x/crypto/x509roots/fallback) and uses them only where the
// system has none, as in this image.
//
// Cost and reproducibility: every timestamp (files, config, history) is
// the Created time given, usually the commit's; file owners are 0:0; so
// the same executables and Options give the same digests, byte for byte.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image runs; deployments/Dockerfile says the same (test/deploy
// checks the Dockerfile, this package's tests the image).
const (
	BinaryPath  = "/bloomgate"
	User        = "65532:65532"
	MetricsPort = "9464/tcp"
)

var (
	Entrypoint = []string{BinaryPath}
	Cmd        = []string{"run"}
	Env        = []string{"BLOOMGATE_METRICS_ADDR=:9464", "BLOOMGATE_LOG_FORMAT=json"}
)

// OCI annotation and label keys (image-spec annotations.md).
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
	LabelTitle    = "org.opencontainers.image.title"
	LabelCreated  = "org.opencontainers.image.created"
	LabelDesc     = "org.opencontainers.image.description"
	// RefName tags the index in index.json of the layout; containerd's
	// (docker load's) name is the full reference.
	RefName        = "org.opencontainers.image.ref.name"
	ContainerdName = "io.containerd.image.name"
)

// Options describe one release's image.
type Options struct {
	Version  string    // e.g. v0.1.0: label, and the tag in the layout
	Revision string    // the commit
	Source   string    // the repository URL
	Licenses string    // SPDX expression
	Name     string    // repository the image is meant for, without tag (ghcr.io/bloomgate/bloomgate)
	Created  time.Time // every timestamp; the commit's time for reproducible output
	// Binaries maps a platform "os/arch" to the executable built for it
	// (CGO_ENABLED=0: it must run on no libc).
	Binaries map[string]string
}

// Validate reports what is missing.
func (o Options) Validate() error {
	var problems []string
	for name, v := range map[string]string{"version": o.Version, "revision": o.Revision, "source": o.Source, "licenses": o.Licenses, "name": o.Name} {
		if v == "" {
			problems = append(problems, name+" is empty")
		}
	}
	if o.Created.IsZero() {
		problems = append(problems, "created time is zero")
	}
	if len(o.Binaries) == 0 {
		problems = append(problems, "no binaries")
	}
	for p := range o.Binaries {
		if os, arch, ok := strings.Cut(p, "/"); !ok || os == "" || arch == "" {
			problems = append(problems, fmt.Sprintf("platform %q: want os/arch", p))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("image options: %s", strings.Join(problems, "; "))
	}
	return nil
}

// Labels are the OCI labels of every platform's image config, and the
// annotations of the index.
func (o Options) Labels() map[string]string {
	return map[string]string{
		LabelVersion:  o.Version,
		LabelRevision: o.Revision,
		LabelSource:   o.Source,
		LabelLicenses: o.Licenses,
		LabelTitle:    "bloomgate",
		LabelDesc:     "Kafka dedup worker with rotating, checkpointed Bloom filters",
		LabelCreated:  o.Created.UTC().Format(time.RFC3339),
	}
}

// Build returns the multi-platform index, its images in platform order.
func Build(o Options) (v1.ImageIndex, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	platforms := make([]string, 0, len(o.Binaries))
	for p := range o.Binaries {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, err := platformImage(o, p)
		if err != nil {
			return nil, err
		}
		goos, arch, _ := strings.Cut(p, "/")
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: arch}},
		})
	}
	return mutate.Annotations(idx, o.Labels()).(v1.ImageIndex), nil
}

func platformImage(o Options, platform string) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binaries[platform])
	if err != nil {
		return nil, fmt.Errorf("reading the %s executable: %w", platform, err)
	}
	rootfs, err := layerTar(bin, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(rootfs)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", platform, err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: o.Created.UTC()}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "bloomgate release: " + BinaryPath + " (" + platform + ")", Comment: o.Version},
	})
	if err != nil {
		return nil, fmt.Errorf("%s image: %w", platform, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	goos, arch, _ := strings.Cut(platform, "/")
	cf.OS, cf.Architecture, cf.Created = goos, arch, created
	cf.Config = v1.Config{
		User:         User,
		Entrypoint:   Entrypoint,
		Cmd:          Cmd,
		Env:          Env,
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{MetricsPort: {}},
		Labels:       o.Labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("%s config: %w", platform, err)
	}
	return img, nil
}

// layerTar is the root filesystem: /bloomgate (0555, root-owned, so the
// user 65532 cannot replace it) and an empty /tmp (1777).
func layerTar(bin []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := created.UTC()
	entries := []struct {
		hdr  tar.Header
		body []byte
	}{
		{tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: mt}, nil},
		{tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(BinaryPath, "/"), Mode: 0o555, Size: int64(len(bin)), ModTime: mt}, bin},
	}
	for _, e := range entries {
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes idx as an OCI image layout in dir (which must not
// exist yet): index.json names the multi-platform index, tagged with the
// version and, for containerd and docker load, the full reference.
func WriteLayout(dir string, idx v1.ImageIndex, o Options) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists: remove it first", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		RefName:        o.Version,
		ContainerdName: o.Name + ":" + o.Version,
	}))
}

// WriteArchive writes the layout in dir as an uncompressed tar to path,
// entries sorted, every timestamp created, owners 0:0: the same layout
// gives the same bytes.
func WriteArchive(path, dir string, created time.Time) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	mt := created.UTC()
	var names []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	}); err != nil {
		return err
	}
	slices.Sort(names)
	for _, p := range names {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		hdr := &tar.Header{Name: rel, ModTime: mt, Mode: 0o644, Format: tar.FormatPAX}
		if fi.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, rel+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
