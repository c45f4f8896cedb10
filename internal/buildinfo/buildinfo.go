// Package buildinfo reports the version of the running binary.
package buildinfo

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

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

// Info is what the binary knows about its build (`bloomgate version
// --json`).
type Info struct {
	Version   string `json:"version"` // String
	GoVersion string `json:"go_version"`
	// Module and ModuleVersion are the main module as the Go toolchain
	// recorded it: "(devel)" for a build inside a checkout, the version
	// for `go install module@version`.
	Module        string `json:"module"`
	ModuleVersion string `json:"module_version"`
	// Commit is the VCS revision the toolchain stamped (a build inside a
	// checkout), else the one a pseudo-version names; "" if unknown.
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	// Dirty: the checkout had uncommitted changes (vcs.modified), or the
	// link-time version says so (-dirty, as git describe --dirty writes).
	Dirty    bool     `json:"dirty"`
	Platform string   `json:"platform"` // GOOS/GOARCH
	Deps     []Module `json:"dependencies"`
}

// Module is a dependency compiled into the binary.
type Module struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	// Replace is the replacement's path@version, if the module was
	// replaced.
	Replace string `json:"replace,omitempty"`
}

// pseudoRevision is the revision a pseudo-version ends with
// (v0.0.0-20260101000000-0123456789ab, v1.2.4-0.20260101000000-…,
// v1.2.3-pre.0.20260101000000-…).
var pseudoRevision = regexp.MustCompile(`[-.]\d{14}-([0-9a-f]{12})(?:\+incompatible)?$`)

// Read returns the binary's build information.
func Read() Info {
	info := Info{Version: String(), GoVersion: GoVersion(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Dirty: strings.HasSuffix(Version, "-dirty"), Deps: []Module{}}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.Module, info.ModuleVersion = bi.Main.Path, bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			info.CommitTime = s.Value
		case "vcs.modified":
			info.Dirty = info.Dirty || s.Value == "true"
		}
	}
	if m := pseudoRevision.FindStringSubmatch(bi.Main.Version); info.Commit == "" && m != nil {
		info.Commit = m[1]
	}
	for _, d := range bi.Deps {
		m := Module{Path: d.Path, Version: d.Version}
		if d.Replace != nil {
			m.Replace = d.Replace.Path + "@" + d.Replace.Version
		}
		info.Deps = append(info.Deps, m)
	}
	return info
}

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
