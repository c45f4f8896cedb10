package checkpoint

import (
	"os"
	"testing"
)

// externalS3Env names the S3 location TestExternalS3 runs against:
// s3://bucket/prefix?endpoint=…&region=…, credentials in the AWS_*
// variables. test/containers sets it to MinIO in a container.
const externalS3Env = "BLOOMGATE_TEST_S3_URL"

// TestExternalS3 runs the acceptance suite against a real S3 server (the
// bucket must exist). test/containers, a module of its own so that
// testcontainers and Docker's client stay out of this module, starts MinIO
// and runs it; without the variable it skips.
func TestExternalS3(t *testing.T) {
	url := os.Getenv(externalS3Env)
	if url == "" {
		t.Skip(externalS3Env + " not set: test/containers runs this against MinIO in a container (make test, where a Docker engine exists)")
	}
	t.Run("lifecycle", func(t *testing.T) { testLifecycle(t, withSuffix(url, "-life")) })
	t.Run("corruption", func(t *testing.T) { testCorruption(t, withSuffix(url, "-corrupt")) })
	t.Run("fencing", func(t *testing.T) { testFencing(t, withSuffix(url, "-fence")) })
	t.Run("race", func(t *testing.T) { testRace(t, withSuffix(url, "-race"), 100) })
	t.Run("create-only-check", func(t *testing.T) { testProbe(t, withSuffix(url, "-probe")) })
}
