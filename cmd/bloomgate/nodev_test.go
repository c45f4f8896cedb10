package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

const mainPackage = "github.com/bloomgate/bloomgate/cmd/bloomgate"

// TestWorkerBuild builds the executable with -tags nodev, as the container
// image does (deployments/Dockerfile), and runs it: the worker and its tools
// are there, dev and broker say which build has them, and nothing of the
// embedded broker is linked. Neither build links text/template.
func TestWorkerBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the executable: not with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := proctest.Build(ctx, t.TempDir(), proctest.BuildOptions{Flags: []string{"-tags", "nodev"}})
	if err != nil {
		t.Fatal(err)
	}
	mods, err := exec.CommandContext(ctx, "go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	if !strings.Contains(string(mods), "-tags=nodev") {
		t.Errorf("build settings lack -tags=nodev:\n%s", mods)
	}
	// kfake, and the kgo client it uses, are out; the worker's own are in.
	for mod, want := range map[string]bool{
		"github.com/twmb/franz-go":      false,
		"github.com/segmentio/kafka-go": true,
		"github.com/aws/aws-sdk-go-v2":  true,
	} {
		if got := strings.Contains(string(mods), "\tdep\t"+mod+"\t"); got != want {
			t.Errorf("module %s linked: %v, want %v", mod, got, want)
		}
	}

	// Nothing reachable may look methods up by name (text/template does):
	// the linker then keeps every exported method of every type, ~8 MB of
	// executable (internal/statuspage/render.go).
	for _, tags := range []string{"", "nodev"} {
		deps, err := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", tags, mainPackage).Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %q: %v", tags, err)
		}
		if strings.Contains(string(deps), "text/template\n") {
			t.Errorf("the build with tags %q links text/template", tags)
		}
	}

	runBin := func(args ...string) (stdout, stderr string, code int) {
		var o, e bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			t.Fatalf("%s %q: %v", bin, args, err)
		}
		return o.String(), e.String(), code
	}
	help, _, code := runBin("--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, c := range []string{"run", "check", "loadgen", "inspect", "version"} {
		if !strings.Contains(help, "\n  "+c+" ") {
			t.Errorf("--help lacks command %s:\n%s", c, help)
		}
	}
	if strings.Contains(help, "\n  dev ") || strings.Contains(help, "bloomgate broker") || strings.Contains(help, "bloomgate dev") {
		t.Errorf("--help offers what this build lacks:\n%s", help)
	}
	for _, c := range []string{"dev", "broker"} {
		_, stderr, code := runBin(c, "--help")
		if code != exitUsage || !strings.Contains(stderr, "bloomgate "+c+": not in this executable") || !strings.Contains(stderr, "make build") {
			t.Errorf("%s: exit %d, stderr %q; want %d naming the full build", c, code, stderr, exitUsage)
		}
	}
	if _, stderr, code := runBin("run", "--help"); code != exitOK {
		t.Errorf("run --help: exit %d: %s", code, stderr)
	}
	if out, stderr, code := runBin("version"); code != exitOK || !strings.HasPrefix(out, "bloomgate ") {
		t.Errorf("version: exit %d, %q %q", code, out, stderr)
	}
}
