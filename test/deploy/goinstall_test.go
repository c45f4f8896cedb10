package deploy

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/buildinfo"
)

const module = "github.com/bloomgate/bloomgate"

// moduleProxy writes a file:// module proxy that serves this checkout as
// module@version: its go.mod and a zip of the files git tracks, without
// nested modules (bench/).
func moduleProxy(t *testing.T, dir, version string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("listing the module's files needs a git checkout: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	var nested []string
	for _, f := range files {
		if path.Base(f) == "go.mod" && f != "go.mod" {
			nested = append(nested, path.Dir(f)+"/")
		}
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
files:
	for _, f := range files {
		for _, n := range nested {
			if strings.HasPrefix(f, n) {
				continue files
			}
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the working tree
			}
			t.Fatal(err)
		}
		w, err := zw.Create(module + "@" + version + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(dir, filepath.FromSlash(module), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": []byte(`{"Version":"` + version + `","Time":"2026-01-01T00:00:00Z"}`),
		version + ".mod":  repoFile(t, "go.mod"),
		version + ".zip":  buf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoInstallReportsVersion: `go install module/cmd/bloomgate@version`
// (from a file:// module proxy that serves this checkout at a
// pseudo-version, dependencies from the module cache) gives a binary that
// reports that version and the commit it names without any link-time
// stamp, in `version` and in `version --json`.
func TestGoInstallReportsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary through go install")
	}
	// A version of its own per run: the module cache takes a module
	// version as immutable, and other checkouts may run this test too.
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	commit := hex.EncodeToString(rnd[:])
	version := "v0.0.0-" + time.Now().UTC().Format("20060102150405") + "-" + commit
	dir := t.TempDir()
	proxy := filepath.Join(dir, "proxy")
	moduleProxy(t, proxy, version)
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // what go install put into the shared module cache for this version
		mc := strings.TrimSpace(string(modcache))
		os.RemoveAll(filepath.Join(mc, filepath.FromSlash(module)+"@"+version))
		matches, _ := filepath.Glob(filepath.Join(mc, "cache", "download", filepath.FromSlash(module), "@v", version+".*"))
		for _, m := range matches {
			os.Remove(m)
		}
		// The version list it cached (rebuilt when needed) and the
		// directories, if no other version is kept there.
		os.Remove(filepath.Join(mc, "cache", "download", filepath.FromSlash(module), "@v", "list"))
		for _, d := range []string{
			filepath.Join(mc, "cache", "download", filepath.FromSlash(module), "@v"),
			filepath.Join(mc, "cache", "download", filepath.FromSlash(module)),
			filepath.Join(mc, "cache", "download", filepath.FromSlash(path.Dir(module))),
			filepath.Join(mc, filepath.FromSlash(path.Dir(module))),
		} {
			os.Remove(d)
		}
	})
	gobin := filepath.Join(dir, "bin")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", module+"/cmd/bloomgate@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOPROXY=file://"+filepath.ToSlash(proxy), "GOSUMDB=off",
		"GOFLAGS=-modcacherw", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	bin := filepath.Join(gobin, "bloomgate")
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "bloomgate "+version+" (go") {
		t.Errorf("version: %q, %v; want bloomgate %s (go…)", out, err, version)
	}
	out, err = exec.CommandContext(ctx, bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var info buildinfo.Info
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	kafkaGo := false
	for _, d := range info.Deps {
		kafkaGo = kafkaGo || (d.Path == "github.com/segmentio/kafka-go" && d.Version != "")
	}
	if info.Version != version || info.ModuleVersion != version || info.Module != module || info.Commit != commit || info.Dirty || !kafkaGo {
		t.Errorf("version --json: %+v", info)
	}
}
