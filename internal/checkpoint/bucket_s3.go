package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// s3Bucket talks to AWS S3 or a compatible server with aws-sdk-go-v2.
//
// The SDK's retryer is off: errors are classified here (transient or not)
// and the Store retries Get, List, Delete and Attributes. Put retries itself
// (each part of a multipart upload, or the single PutObject), because only
// it holds the buffered bytes a retry needs.
//
// Large objects go up as multipart uploads: at most Concurrency parts of
// PartSize bytes are in memory (and in flight) at once, never the whole
// object. Create-only writes send If-None-Match: * on PutObject, or on
// CompleteMultipartUpload for large objects; AWS S3 and versitygw (checked by
// a test) answer 412 when the key exists.
type s3Bucket struct {
	client      *s3.Client
	transports  *transportSet
	bucket      string
	prefix      string
	retry       retrier
	partSize    int
	concurrency int
	bufs        chan []byte
}

func openS3(ctx context.Context, loc location, o *Options) (*s3Bucket, error) {
	region := loc.query.Get("region")
	endpoint := loc.query.Get("endpoint")
	// The SDK's default transport settings, plus a bound on the wait for
	// response headers and enough idle connections for parallel parts.
	// The transports built are remembered, to close idle connections on
	// Close.
	transports := &transportSet{}
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.ResponseHeaderTimeout = o.RequestTimeout
		tr.MaxIdleConnsPerHost = 2 * o.UploadConcurrency
		transports.add(tr)
	})
	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(hc),
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		// The SDK's own log lines (e.g. "WARN falling back to IMDSv1")
		// go to the store's logger, structured and at debug level: what
		// matters reaches the user as an error naming the setting.
		config.WithLogger(logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
			o.Logger.Debug("aws sdk: "+fmt.Sprintf(format, v...), "classification", string(c))
		})),
	}
	if region != "" {
		loadOpts = append(loadOpts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Credentials != nil {
		cfg.Credentials = markedCredentials{cfg.Credentials}
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if endpoint != "" {
			so.BaseEndpoint = aws.String(endpoint)
			so.UsePathStyle = true
		}
		// Objects carry their own SHA-256 in the manifest, checked on
		// restore; skip the SDK's extra per-request CRC pass.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		so.DisableLogOutputChecksumValidationSkipped = true
		if strings.HasPrefix(endpoint, "https://") || endpoint == "" {
			// Over TLS the payload needs no signature of its own: saves a
			// SHA-256 pass over every byte uploaded.
			so.APIOptions = append(so.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
		}
	})
	b := &s3Bucket{
		client:      client,
		transports:  transports,
		bucket:      loc.bucket,
		prefix:      loc.prefix,
		retry:       o.retrier(),
		partSize:    o.PartSize,
		concurrency: o.UploadConcurrency,
		bufs:        make(chan []byte, o.UploadConcurrency+1),
	}
	return b, nil
}

func (b *s3Bucket) key(k string) *string { return aws.String(joinKey(b.prefix, k)) }

// ErrNoCredentials: the AWS SDK's default chain (environment, shared
// config, web identity, container or instance role) found no credentials
// for s3://. Not retried: waiting does not create them.
var ErrNoCredentials = errors.New("no S3 credentials")

// credentialsError is a failure of the credentials chain; it wraps
// ErrNoCredentials and keeps the SDK's error for the debug log.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string        { return "no S3 credentials: " + e.err.Error() }
func (e *credentialsError) Is(target error) bool { return target == ErrNoCredentials }
func (e *credentialsError) Unwrap() error        { return e.err }

// markedCredentials marks the errors of the credentials chain, which the
// SDK wraps in untyped errors ("get identity: get credentials: …").
type markedCredentials struct{ p aws.CredentialsProvider }

func (m markedCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := m.p.Retrieve(ctx)
	if err != nil && ctx.Err() == nil {
		return c, &credentialsError{err: err}
	}
	return c, err
}

// classify maps SDK errors onto errNotExist, errExists and transient.
func classifyS3(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNoCredentials) {
		return err
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() != 0 { // 0: no response at all
		switch code := re.HTTPStatusCode(); {
		case code == http.StatusNotFound:
			var nb *types.NoSuchBucket
			if errors.As(err, &nb) {
				return err
			}
			var ae smithy.APIError
			if errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket" {
				return err
			}
			return fmt.Errorf("%w: %w", errNotExist, err)
		case code == http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %w", errExists, err)
		case code == http.StatusConflict, code == http.StatusTooManyRequests,
			code == http.StatusRequestTimeout, code >= 500:
			// 409 ConditionalRequestConflict: a concurrent conditional write
			// is in progress; retrying yields 412 or success.
			return transient(err)
		}
		return err
	}
	var se *smithy.CanceledError
	if errors.As(err, &se) {
		return err
	}
	var rse *smithyhttp.RequestSendError
	var ne net.Error
	if errors.As(err, &rse) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) {
		return transient(err)
	}
	return err
}

func (b *s3Bucket) Get(ctx context.Context, key string, off int64) (io.ReadCloser, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: b.key(key)}
	if off > 0 {
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	var out *s3.GetObjectOutput
	// The body outlives the attempt: no per-attempt context timeout here
	// (the transport bounds the wait for response headers).
	r := b.retry
	r.timeout = 0
	err := r.once(ctx, func(ctx context.Context) error {
		var err error
		out, err = b.client.GetObject(ctx, in)
		if err != nil {
			var re *awshttp.ResponseError
			if off > 0 && errors.As(err, &re) && re.HTTPStatusCode() == http.StatusRequestedRangeNotSatisfiable {
				out = &s3.GetObjectOutput{Body: io.NopCloser(bytes.NewReader(nil))}
				return nil
			}
		}
		return classifyS3(err)
	})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return out.Body, nil
}

func (b *s3Bucket) getBuf() []byte {
	select {
	case buf := <-b.bufs:
		return buf
	default:
		return make([]byte, b.partSize)
	}
}

func (b *s3Bucket) putBuf(buf []byte) {
	select {
	case b.bufs <- buf:
	default:
	}
}

func (b *s3Bucket) Put(ctx context.Context, key string, r io.Reader, createOnly bool) (int64, error) {
	buf := b.getBuf()
	n, err := io.ReadFull(r, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		defer b.putBuf(buf)
		if err := b.putSmall(ctx, key, buf[:n], createOnly); err != nil {
			return 0, err
		}
		return int64(n), nil
	}
	if err != nil {
		b.putBuf(buf)
		return 0, fmt.Errorf("put %s: reading: %w", key, err)
	}
	return b.putMultipart(ctx, key, r, buf, createOnly)
}

func (b *s3Bucket) putSmall(ctx context.Context, key string, data []byte, createOnly bool) error {
	in := &s3.PutObjectInput{Bucket: aws.String(b.bucket), Key: b.key(key), ContentLength: aws.Int64(int64(len(data)))}
	if createOnly {
		in.IfNoneMatch = aws.String("*")
	}
	err := b.retry.do(ctx, func(ctx context.Context) error {
		in.Body = bytes.NewReader(data)
		_, err := b.client.PutObject(ctx, in)
		return classifyS3(err)
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// putMultipart uploads first (a full part) and the rest of r in parts,
// concurrently, reusing at most concurrency+1 part buffers.
func (b *s3Bucket) putMultipart(ctx context.Context, key string, r io.Reader, first []byte, createOnly bool) (int64, error) {
	var uploadID *string
	err := b.retry.do(ctx, func(ctx context.Context) error {
		out, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(b.bucket), Key: b.key(key)})
		if err == nil {
			uploadID = out.UploadId
		}
		return classifyS3(err)
	})
	if err != nil {
		b.putBuf(first)
		return 0, fmt.Errorf("put %s: starting multipart upload: %w", key, err)
	}
	abort := func() {
		// A fresh context: the caller's may be what ended the upload.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.retry.timeout)
		defer cancel()
		_, _ = b.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(b.bucket), Key: b.key(key), UploadId: uploadID})
	}

	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		parts    []types.CompletedPart
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, b.concurrency)
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	upload := func(num int32, data, buf []byte) {
		defer wg.Done()
		defer func() { <-sem }()
		defer b.putBuf(buf)
		err := b.retry.do(uctx, func(ctx context.Context) error {
			out, err := b.client.UploadPart(ctx, &s3.UploadPartInput{
				Bucket: aws.String(b.bucket), Key: b.key(key), UploadId: uploadID,
				PartNumber: aws.Int32(num), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
			})
			if err == nil {
				mu.Lock()
				parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
				mu.Unlock()
			}
			return classifyS3(err)
		})
		if err != nil {
			fail(fmt.Errorf("uploading part %d: %w", num, err))
		}
	}

	total := int64(len(first))
	buf, data := first, first
	var readErr error
	for num := int32(1); ; num++ {
		select {
		case sem <- struct{}{}:
		case <-uctx.Done():
		}
		if uctx.Err() != nil {
			b.putBuf(buf)
			break
		}
		wg.Add(1)
		go upload(num, data, buf)
		if readErr != nil {
			break
		}
		buf = b.getBuf()
		n, err := io.ReadFull(r, buf)
		total += int64(n)
		if err == io.EOF {
			b.putBuf(buf)
			break
		}
		if err == io.ErrUnexpectedEOF {
			data, readErr = buf[:n], io.EOF // last, short part
			continue
		}
		if err != nil {
			b.putBuf(buf)
			fail(fmt.Errorf("reading: %w", err))
			break
		}
		data = buf
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		abort()
		return 0, fmt.Errorf("put %s: %w", key, firstErr)
	}
	sort.Slice(parts, func(i, j int) bool { return *parts[i].PartNumber < *parts[j].PartNumber })
	in := &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(b.bucket), Key: b.key(key), UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if createOnly {
		in.IfNoneMatch = aws.String("*")
	}
	err = b.retry.do(ctx, func(ctx context.Context) error {
		_, err := b.client.CompleteMultipartUpload(ctx, in)
		return classifyS3(err)
	})
	if err != nil {
		abort()
		return 0, fmt.Errorf("put %s: completing multipart upload: %w", key, err)
	}
	return total, nil
}

func (b *s3Bucket) List(ctx context.Context, prefix string, fn func(objectAttrs) error) error {
	full := joinKey(b.prefix, prefix)
	if b.prefix != "" && prefix == "" {
		full = b.prefix + "/"
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(full)}
	for {
		var out *s3.ListObjectsV2Output
		err := b.retry.once(ctx, func(ctx context.Context) error {
			var err error
			out, err = b.client.ListObjectsV2(ctx, in)
			return classifyS3(err)
		})
		if err != nil {
			return fmt.Errorf("listing %s: %w", full, err)
		}
		for _, o := range out.Contents {
			k := aws.ToString(o.Key)
			if b.prefix != "" {
				k = strings.TrimPrefix(k, b.prefix+"/")
			}
			a := objectAttrs{Key: k, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)}
			if err := fn(a); err != nil {
				return err
			}
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			return nil
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}

func (b *s3Bucket) Delete(ctx context.Context, key string) error {
	err := b.retry.once(ctx, func(ctx context.Context) error {
		_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: b.key(key)})
		err = classifyS3(err)
		if errors.Is(err, errNotExist) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

func (b *s3Bucket) Attributes(ctx context.Context, key string) (objectAttrs, error) {
	var out *s3.HeadObjectOutput
	err := b.retry.once(ctx, func(ctx context.Context) error {
		var err error
		out, err = b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: b.key(key)})
		return classifyS3(err)
	})
	if err != nil {
		return objectAttrs{}, fmt.Errorf("attributes %s: %w", key, err)
	}
	return objectAttrs{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified)}, nil
}

func (b *s3Bucket) Close() error {
	b.transports.closeIdle()
	return nil
}

type transportSet struct {
	mu  sync.Mutex
	trs []*http.Transport
}

func (s *transportSet) add(tr *http.Transport) {
	s.mu.Lock()
	s.trs = append(s.trs, tr)
	s.mu.Unlock()
}

func (s *transportSet) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tr := range s.trs {
		tr.CloseIdleConnections()
	}
}
