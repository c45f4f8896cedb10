package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/bloomgate/bloomgate/internal/buildinfo"
)

// cmdVersion prints the version, or with --json the whole build
// information: module versions, Go version, commit and dirty flag.
func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the build information as JSON: version, Go version, module, commit, dirty flag, platform, dependencies")
	header := `Usage: bloomgate version [--json]

Prints the version: the one stamped at link time (make build, the image),
else the module version of go install …@version, else dev-<commit>.

Flags:
`
	if done, code := parseFlags(fs, args, header, stdout, stderr); done {
		return code
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(buildinfo.Read()); err != nil {
			return exitCode(stderr, "version", err)
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "bloomgate %s (%s)\n", buildinfo.String(), buildinfo.GoVersion())
	return exitOK
}
