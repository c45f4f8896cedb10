package ociimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func options(t *testing.T, created time.Time) Options {
	t.Helper()
	dir := t.TempDir()
	bins := map[string]string{}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		f := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"))
		if err := os.WriteFile(f, []byte("not an executable: "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[p] = f
	}
	return Options{Version: "v9.9.9", Revision: "0123abcd", Source: "https://example.invalid/bloomgate", Licenses: "Apache-2.0",
		Name: "registry.invalid/bloomgate", Created: created, Binaries: bins}
}

// TestBuildReproducible: the same inputs give the same index digest, and
// the created time is part of it (it is every timestamp in the image).
func TestBuildReproducible(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	o := options(t, at)
	a, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds: %s and %s", da, db)
	}
	o.Created = at.Add(time.Second)
	c, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Error("another created time gave the same digest")
	}
	m, err := a.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 || m.Manifests[0].Platform.Architecture != "amd64" || m.Manifests[1].Platform.Architecture != "arm64" {
		t.Errorf("manifests %+v, want amd64 then arm64", m.Manifests)
	}
}

// TestWriteLayoutAndArchive: the layout reads back with the same digest;
// the archive is byte-identical when written twice.
func TestWriteLayoutAndArchive(t *testing.T) {
	o := options(t, time.Unix(1_800_000_000, 0))
	idx, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := WriteLayout(dir, idx, o); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, idx, o); err == nil {
		t.Error("WriteLayout over an existing directory succeeded")
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != want || im.Manifests[0].Annotations[RefName] != "v9.9.9" {
		t.Errorf("index.json %+v, want %s tagged v9.9.9", im.Manifests, want)
	}
	var archives [2][]byte
	for i := range archives {
		f := filepath.Join(t.TempDir(), "a.tar")
		if err := WriteArchive(f, dir, o.Created); err != nil {
			t.Fatal(err)
		}
		if archives[i], err = os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	if string(archives[0]) != string(archives[1]) {
		t.Error("two archives of one layout differ")
	}
}

func TestValidate(t *testing.T) {
	o := options(t, time.Unix(1, 0))
	o.Version, o.Created = "", time.Time{}
	o.Binaries["amd64"] = "x"
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"version is empty", "created time is zero", `platform "amd64"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
	if _, err := Build(o); err == nil {
		t.Error("Build accepted invalid options")
	}
}
