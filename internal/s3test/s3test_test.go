package s3test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func TestStartPutGetRestart(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := s.Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(Bucket), Key: aws.String("a/b"), Body: bytes.NewReader([]byte("hello"))}); err != nil {
		t.Fatalf("put: %v", err)
	}
	s.Restart()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(Bucket), Key: aws.String("a/b")})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "hello" {
		t.Fatalf("got %q after restart", b)
	}
	s.Stop()
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(Bucket), Key: aws.String("a/b")}); err == nil {
		t.Fatal("head succeeded on a stopped server")
	}
}

// TestConditionalWrites pins what the server does with If-None-Match: * on
// PutObject and on CompleteMultipartUpload, which the checkpoint fencing
// relies on.
func TestConditionalWrites(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := s.Client()
	put := func(key, body string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(Bucket), Key: aws.String(key),
			Body: bytes.NewReader([]byte(body)), IfNoneMatch: aws.String("*")})
		return err
	}
	if err := put("m/1", "first"); err != nil {
		t.Fatalf("first create-only put: %v", err)
	}
	err := put("m/1", "second")
	t.Logf("second PutObject If-None-Match:* -> status %d err %v", httpStatus(err), err)
	if httpStatus(err) != http.StatusPreconditionFailed {
		t.Fatalf("second create-only PutObject: want 412, got %d (%v)", httpStatus(err), err)
	}

	multipart := func(key, body string) error {
		cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(Bucket), Key: aws.String(key)})
		if err != nil {
			return err
		}
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(Bucket), Key: aws.String(key),
			UploadId: cr.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte(body))})
		if err != nil {
			return err
		}
		_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(Bucket), Key: aws.String(key),
			UploadId: cr.UploadId, IfNoneMatch: aws.String("*"),
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: up.ETag, PartNumber: aws.Int32(1)}}}})
		if err != nil {
			_, _ = c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(Bucket), Key: aws.String(key), UploadId: cr.UploadId})
		}
		return err
	}
	if err := multipart("m/2", "first"); err != nil {
		t.Fatalf("first create-only multipart: %v", err)
	}
	err = multipart("m/2", "second")
	t.Logf("second CompleteMultipartUpload If-None-Match:* -> status %d err %v", httpStatus(err), err)
	if httpStatus(err) != http.StatusPreconditionFailed {
		t.Fatalf("second create-only multipart: want 412, got %d (%v)", httpStatus(err), err)
	}
	// The object keeps its first content.
	for _, k := range []string{"m/1", "m/2"} {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(Bucket), Key: aws.String(k)})
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		b, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if string(b) != "first" {
			t.Fatalf("%s = %q, want the first write", k, b)
		}
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		t.Logf("error code %q", ae.ErrorCode())
	}
}

// TestStripIfNoneMatch: behind a proxy that drops If-None-Match, a second
// create-only PutObject succeeds and replaces the object, as on a store that
// ignores conditional writes; other requests still pass (the proxy signs
// what it changed again).
func TestStripIfNoneMatch(t *testing.T) {
	s := Start(t)
	proxy := NewFaultProxy(t, s.Endpoint())
	proxy.Inject(func(*http.Request) Fault { return Fault{StripIfNoneMatch: true} })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := ClientFor(proxy.Endpoint())
	for _, body := range []string{"first", "second"} {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(Bucket), Key: aws.String("m/1"),
			Body: bytes.NewReader([]byte(body)), IfNoneMatch: aws.String("*")})
		if err != nil {
			t.Fatalf("create-only put %q through the stripping proxy: status %d, %v", body, httpStatus(err), err)
		}
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(Bucket), Key: aws.String("m/1")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "second" {
		t.Fatalf("object = %q, want the second write (overwritten)", b)
	}
	if got := proxy.Faults(); got != 2 {
		t.Fatalf("faults = %d, want 2 (both puts stripped, the get untouched)", got)
	}
}
