package proctest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mainPackage is the import path of the command Build compiles.
const mainPackage = "github.com/bloomgate/bloomgate/cmd/bloomgate"

// BuildOptions are the variations the test packages need.
type BuildOptions struct {
	// Flags are added to go build, e.g. -race, -trimpath, -ldflags "-X …".
	Flags []string
	// Env is added to go build's environment, e.g. CGO_ENABLED=0.
	Env []string
}

// Build compiles the bloomgate command into dir and returns the binary's
// path. It must run inside this module (as every test does). The error
// carries go build's output.
func Build(ctx context.Context, dir string, opt BuildOptions) (string, error) {
	bin := filepath.Join(dir, "bloomgate")
	args := append(append([]string{"build", "-o", bin}, opt.Flags...), mainPackage)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), opt.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// Main is the body of a TestMain for a package whose tests run the binary:
// it builds it once into a temporary directory, sets *bin, runs the tests,
// removes the directory and returns the exit code. When the build fails it
// prints why and returns 1 without running any test.
func Main(m *testing.M, bin *string, opt BuildOptions) int {
	dir, err := os.MkdirTemp("", "bloomgate-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "building bloomgate:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bin, err = Build(context.Background(), dir, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building bloomgate:", err)
		return 1
	}
	return m.Run()
}
