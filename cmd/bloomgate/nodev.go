//go:build nodev

package main

// Built with -tags nodev (the container image is), the executable has the
// worker and its tools but not the embedded broker: dev and broker answer
// with where to find them (notBuilt).
func devCommands() []command { return nil }

const devQuickStart = ""

// notBuilt reports whether name is a command this build leaves out.
func notBuilt(name string) bool { return name == "dev" || name == "broker" }
