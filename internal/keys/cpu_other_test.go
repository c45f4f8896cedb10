//go:build !unix

package keys

import "testing"

// reportCPUPerOp reports nothing where getrusage is missing.
func reportCPUPerOp(*testing.B) func(ops int) { return func(int) {} }
