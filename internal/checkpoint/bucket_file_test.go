package checkpoint

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileModes: objects are written 0600 and the directories created for
// them 0700, by a replacing and by a create-only write; a directory that
// already exists keeps its mode.
func TestFileModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "checkpoints")
	b, err := openFile(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Put(ctx, "g/t/0/manifest-1", strings.NewReader("seed"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "g/t/1/gen-1", strings.NewReader("filter"), false); err != nil {
		t.Fatal(err)
	}
	// The umask only removes bits; these are the owner's, which no usual
	// umask removes.
	for _, tc := range []struct {
		path string
		want fs.FileMode
	}{
		{root, 0o700},
		{filepath.Join(root, "g"), 0o700},
		{filepath.Join(root, "g", "t"), 0o700},
		{filepath.Join(root, "g", "t", "0"), 0o700},
		{filepath.Join(root, "g", "t", "0", "manifest-1"), 0o600},
		{filepath.Join(root, "g", "t", "1", "gen-1"), 0o600},
	} {
		st, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != tc.want {
			t.Errorf("%s: mode %v, want %v", tc.path, got, tc.want)
		}
	}

	// An existing, looser directory is left as it is.
	old := filepath.Join(t.TempDir(), "old")
	if err := os.MkdirAll(filepath.Join(old, "g"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(old, "g"), 0o755); err != nil {
		t.Fatal(err)
	}
	ob, _ := openFile(old)
	if _, err := ob.Put(ctx, "g/m", strings.NewReader("x"), false); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(old, "g")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("existing directory: %v, %v; want it left at 0755", st.Mode().Perm(), err)
	}
	if st, err := os.Stat(filepath.Join(old, "g", "m")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("new object in an existing directory: %v, %v; want 0600", st.Mode().Perm(), err)
	}
}
