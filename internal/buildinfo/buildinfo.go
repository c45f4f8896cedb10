// Package buildinfo reports the version of the running binary.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is set at link time with
//
//	-ldflags "-X github.com/bloomgate/bloomgate/internal/buildinfo.Version=v1.2.3"
//
// When unset, String falls back to the module version recorded by the Go
// toolchain (go install module@version), then to the VCS revision, then "dev".
var Version = ""

// String returns the version of the binary.
func String() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified == "true" {
			rev += "-dirty"
		}
		return "dev-" + rev
	}
	return "dev"
}

// GoVersion is the Go toolchain that built the binary.
func GoVersion() string { return runtime.Version() }

// Collector exports bloomgate_build_info{version,goversion} = 1, so that
// dashboards can show which build runs where.
func Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "bloomgate_build_info",
		Help:        "Build information of the running binary; the value is always 1.",
		ConstLabels: prometheus.Labels{"version": String(), "goversion": GoVersion()},
	})
	g.Set(1)
	return g
}
