package exact

import (
	"path/filepath"
	"testing"
)

// FuzzValidName: a name Restore accepts from a checkpoint's description
// always lands directly inside the store directory and never on a file
// Restore or the store use for themselves.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"000012.sst", "MANIFEST-000001", "marker.manifest.000001.MANIFEST-000001", "OPTIONS-000003",
		"../x", "a/b", ".", "..", "LOCK", "checkpoints", "x.restoring", "", "a\x00b", `a\b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !validName(name) {
			return
		}
		const dir = "/store"
		p := filepath.Join(dir, name)
		if filepath.Dir(p) != dir || filepath.Base(p) != name {
			t.Fatalf("accepted %q resolves to %q", name, p)
		}
		if name == lockFile || name == snapshotsDir || filepath.Ext(name) == restoringExt {
			t.Fatalf("accepted reserved name %q", name)
		}
	})
}
