package containers

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/minio"
)

// minioImage is pinned: a release that honours If-None-Match on PutObject
// and CompleteMultipartUpload.
const minioImage = "minio/minio:RELEASE.2025-04-22T22-12-26Z"

// TestMinIO runs the checkpoint store's acceptance suite
// (internal/checkpoint, TestExternalS3) against MinIO in a container. It
// needs a Docker engine and skips with the reason where there is none.
func TestMinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container; skipped in -short mode")
	}
	testcontainers.SkipIfProviderIsNotHealthy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctr, err := minio.Run(ctx, minioImage)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("starting MinIO: %v", err)
	}
	hostPort, err := ctr.ConnectionString(ctx)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + hostPort
	client := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ctr.Username, ctr.Password, ""),
	})
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bloomgate")}); err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	out := runInMainModule(t, []string{
		"BLOOMGATE_TEST_S3_URL=s3://bloomgate/minio?endpoint=" + endpoint + "&region=us-east-1",
		"AWS_ACCESS_KEY_ID=" + ctr.Username, "AWS_SECRET_ACCESS_KEY=" + ctr.Password, "AWS_REGION=us-east-1",
	}, "test", "-count=1", "-timeout=5m", "-run", "^TestExternalS3$", "-v", "./internal/checkpoint")
	if !strings.Contains(out, "--- PASS: TestExternalS3 ") {
		t.Fatal("TestExternalS3 did not run and pass (renamed, or skipped?)")
	}
}

// runInMainModule runs the go command with args in bloomgate's module (two
// directories up), with env added, and returns its output; it fails t if
// the command fails.
func runInMainModule(t *testing.T, env []string, args ...string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("go %v:\n%s", args, out)
	if err != nil {
		t.Fatalf("go %v: %v", args, err)
	}
	return string(out)
}
