package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// bucket is the small object-store surface the checkpoint layout needs,
// implemented for mem://, file:// and s3://. Keys are relative to the
// location's prefix and use "/" as separator.
type bucket interface {
	// Get opens key for reading from byte offset off. errNotExist if absent.
	Get(ctx context.Context, key string, off int64) (io.ReadCloser, error)
	// Put stores what r yields under key and returns the byte count. With
	// createOnly it fails with errExists when key is already present, and
	// never replaces it. Readers never see a partly written object.
	Put(ctx context.Context, key string, r io.Reader, createOnly bool) (int64, error)
	// List calls fn for every object whose key starts with prefix, in
	// lexical key order.
	List(ctx context.Context, prefix string, fn func(objectAttrs) error) error
	// Delete removes key; an absent key is not an error.
	Delete(ctx context.Context, key string) error
	// Attributes returns size and modification time. errNotExist if absent.
	Attributes(ctx context.Context, key string) (objectAttrs, error)
	Close() error
}

type objectAttrs struct {
	Key      string
	Size     int64
	Modified time.Time
}

var (
	errNotExist = errors.New("object does not exist")
	errExists   = errors.New("object already exists")
)

// transientError marks an error worth retrying (5xx, throttling, lost
// connection, per-attempt timeout).
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

func transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err}
}

func isTransient(err error) bool {
	var t *transientError
	return errors.As(err, &t)
}

// location is a parsed store URL.
type location struct {
	scheme string // mem, file, s3
	bucket string // s3 bucket or mem name
	dir    string // file root directory
	prefix string // key prefix inside the bucket, no leading/trailing "/"
	query  url.Values
}

// UnparsableURL says that a checkpoint URL does not parse, without the
// parser's message, which repeats part of the URL (all of it, an invalid
// port or escape) and with it what may be a secret.
const UnparsableURL = "not a valid URL; check its syntax, e.g. s3://bucket/prefix?region=eu-west-1 " +
	"or file:///var/lib/bloomgate (the parser's message is not shown: it repeats part of the URL)"

// CheckURL reports what Open would refuse in a checkpoint URL (scheme,
// bucket, path, parameters) without opening anything. Its errors show the
// URL redacted (RedactURL).
func CheckURL(raw string) error {
	_, err := parseLocation(raw)
	return err
}

// parseLocation's errors show the URL redacted (RedactURL), and an
// unparsable one not at all.
func parseLocation(raw string) (location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return location{}, errors.New("checkpoint URL: " + UnparsableURL)
	}
	shown := RedactURL(raw)
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return location{}, fmt.Errorf("checkpoint URL %s: malformed query (escape %%, & and = in values)", shown)
	}
	loc := location{scheme: u.Scheme, query: query}
	switch u.Scheme {
	case "mem":
		loc.bucket = u.Host
		loc.prefix = strings.Trim(u.Path, "/")
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return location{}, fmt.Errorf("checkpoint URL %s: file URLs take an absolute path (file:///dir), got host %q", shown, u.Host)
		}
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return location{}, fmt.Errorf("checkpoint URL %s: file URLs need an absolute path, e.g. file:///var/lib/bloomgate", shown)
		}
		loc.dir = u.Path
	case "s3":
		if u.Host == "" {
			return location{}, fmt.Errorf("checkpoint URL %s: missing bucket, e.g. s3://bucket/prefix", shown)
		}
		loc.bucket = u.Host
		loc.prefix = strings.Trim(u.Path, "/")
	case "":
		return location{}, fmt.Errorf("checkpoint URL %s: missing scheme (s3://, file:// or mem://)", shown)
	default:
		return location{}, fmt.Errorf("checkpoint URL %s: unsupported scheme %q (s3, file or mem)", shown, u.Scheme)
	}
	for k := range loc.query {
		switch {
		case u.Scheme == "s3" && (k == "endpoint" || k == "region"):
		case plainName(k):
			return location{}, fmt.Errorf("checkpoint URL %s: unknown parameter %q (s3 takes endpoint and region; file and mem none)", shown, k)
		default:
			return location{}, fmt.Errorf("checkpoint URL %s: unknown parameter (s3 takes endpoint and region; file and mem none)", shown)
		}
	}
	return loc, nil
}

func openBucket(ctx context.Context, loc location, o *Options) (bucket, error) {
	switch loc.scheme {
	case "mem":
		return openMem(loc.bucket, loc.prefix), nil
	case "file":
		return openFile(loc.dir)
	case "s3":
		return openS3(ctx, loc, o)
	}
	return nil, fmt.Errorf("unsupported scheme %q", loc.scheme)
}

// joinKey joins a prefix and a key with "/".
func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "/" + key
}
