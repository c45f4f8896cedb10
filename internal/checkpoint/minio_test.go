package checkpoint

import (
	"context"
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

// TestMinIO runs the acceptance suite against MinIO in a container. It needs
// a Docker engine and skips with the reason where there is none.
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
	t.Setenv("AWS_ACCESS_KEY_ID", ctr.Username)
	t.Setenv("AWS_SECRET_ACCESS_KEY", ctr.Password)
	t.Setenv("AWS_REGION", "us-east-1")
	url := "s3://bloomgate/minio?endpoint=" + endpoint + "&region=us-east-1"
	t.Run("lifecycle", func(t *testing.T) { testLifecycle(t, withSuffix(url, "-life")) })
	t.Run("corruption", func(t *testing.T) { testCorruption(t, withSuffix(url, "-corrupt")) })
	t.Run("fencing", func(t *testing.T) { testFencing(t, withSuffix(url, "-fence")) })
	t.Run("race", func(t *testing.T) { testRace(t, withSuffix(url, "-race"), 100) })
	t.Run("create-only-check", func(t *testing.T) { testProbe(t, withSuffix(url, "-probe")) })
}
