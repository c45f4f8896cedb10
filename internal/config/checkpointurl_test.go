package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckpointURLPath: a path given as --checkpoint-url is refused with
// the file:// URL to write instead; a bare name could be a bucket too.
func TestCheckpointURLPath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	for raw, want := range map[string]string{
		"/var/lib/bloomgate": "/var/lib/bloomgate is a path, not a URL: write file:///var/lib/bloomgate",
		"./ck":               "./ck is a path, not a URL: write file://" + filepath.ToSlash(filepath.Join(wd, "ck")),
		"~/ck":               "~/ck is a path, not a URL: write file://" + filepath.ToSlash(filepath.Join(home, "ck")),
		"bucket":             "bucket has no scheme: write file://" + filepath.ToSlash(filepath.Join(wd, "bucket")) + " for a directory, or s3://bucket for a bucket",
		"bucket?region=x":    "bucket?region=x: no scheme; use s3://bucket/prefix, file:///dir or mem://name",
	} {
		err := checkCheckpointURL(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}
