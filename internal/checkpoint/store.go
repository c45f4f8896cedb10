package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/errmark"
)

// Sentinel errors callers branch on (errors.Is).
var (
	// ErrFenced: another writer committed (or claimed) the sequence this
	// writer wanted, or a newer one. The partition now belongs to someone
	// else: stop processing it, do not commit offsets for it.
	ErrFenced = errors.New("checkpoint fenced: another writer owns this partition")
	// ErrNoCheckpoint: the partition has no checkpoint at all (first start).
	ErrNoCheckpoint = errors.New("no checkpoint")
	// ErrNoUsableCheckpoint: checkpoints exist but none could be loaded
	// (all corrupt or referencing missing objects). The caller applies its
	// policy (refuse the partition, or start empty knowingly).
	ErrNoUsableCheckpoint = errors.New("no usable checkpoint")
	// ErrCorrupt wraps every integrity failure: checksum or length
	// mismatch, truncated or missing object, unknown format version. It is
	// errmark.ErrCorrupt in the checkpoint's words.
	ErrCorrupt = errmark.Corrupt("checkpoint data corrupt")
	// ErrIncompatible: a loader refused a sound checkpoint because it was
	// written with settings that cannot be carried over (a different key
	// definition). Restore does not fall back to older manifests for it.
	ErrIncompatible = errors.New("checkpoint incompatible with the settings")
	// ErrLocal: a loader failed for a reason of its own machine, not of
	// the checkpoint (a local disk full, a directory still in use).
	// Restore returns it at once, without falling back to older
	// manifests: they would fail alike, and a caller whose policy on "no
	// usable checkpoint" is to start empty would lose a sound memory. The
	// caller retries later.
	ErrLocal = errors.New("local failure while loading a checkpoint")
)

// Encodings of stored generation objects.
const (
	encodingZstd = "zstd"
	encodingNone = "none"
)

// DefaultRetain is Options.Retain's default: the newest manifests kept
// per partition.
const DefaultRetain = 3

// Options configure a Store. Zero values take the documented defaults.
type Options struct {
	Logger     *slog.Logger          // default: discard
	Registerer prometheus.Registerer // default: metrics not registered

	// Retain is how many newest manifests per partition (and the objects
	// they reference) retention keeps. Default DefaultRetain, minimum 1.
	Retain int
	// OrphanGrace protects unreferenced generation objects younger than
	// this from retention: a writer uploads data before the manifest that
	// names it. Default 1h; keep it well above the longest checkpoint.
	OrphanGrace time.Duration
	// RequestTimeout bounds one attempt of one request (a manifest write, a
	// part of a multipart upload, the wait for response headers). Default 30s.
	RequestTimeout time.Duration
	// MaxAttempts per request on transient errors (5xx, throttling,
	// connection errors, timeouts). Default 5.
	MaxAttempts int
	// RetryBaseDelay and RetryMaxDelay shape the exponential backoff with
	// full jitter. Defaults 100ms and 5s.
	RetryBaseDelay, RetryMaxDelay time.Duration
	// PartSize of multipart uploads (s3). Default 16 MiB, minimum 5 MiB.
	PartSize int
	// UploadConcurrency is the number of parts in flight (s3); memory used
	// by one upload is at most (UploadConcurrency+1)·PartSize. Default 4.
	UploadConcurrency int
	// Compression of generation objects: "zstd" (default; young, sparse
	// generations shrink a lot, full ones are stored at ratio ~1) or "none".
	Compression string

	now func() time.Time // tests
}

// Validate checks the options; errors name the field and the accepted range.
func (o Options) Validate() error {
	switch {
	case o.Retain < 0:
		return fmt.Errorf("checkpoint retain %d: must be >= 1 (0 means default %d)", o.Retain, DefaultRetain)
	case o.OrphanGrace < 0:
		return fmt.Errorf("checkpoint orphan grace %s: must be >= 0", o.OrphanGrace)
	case o.RequestTimeout < 0:
		return fmt.Errorf("checkpoint request timeout %s: must be > 0", o.RequestTimeout)
	case o.MaxAttempts < 0:
		return fmt.Errorf("checkpoint max attempts %d: must be >= 1", o.MaxAttempts)
	case o.PartSize != 0 && o.PartSize < 5<<20:
		return fmt.Errorf("checkpoint part size %d: must be >= 5 MiB (S3 minimum)", o.PartSize)
	case o.UploadConcurrency < 0:
		return fmt.Errorf("checkpoint upload concurrency %d: must be >= 1", o.UploadConcurrency)
	case o.Compression != "" && o.Compression != encodingZstd && o.Compression != encodingNone:
		return fmt.Errorf("checkpoint compression %q: must be \"zstd\" or \"none\"", o.Compression)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Retain == 0 {
		o.Retain = DefaultRetain
	}
	if o.OrphanGrace == 0 {
		o.OrphanGrace = time.Hour
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.RetryBaseDelay == 0 {
		o.RetryBaseDelay = 100 * time.Millisecond
	}
	if o.RetryMaxDelay == 0 {
		o.RetryMaxDelay = 5 * time.Second
	}
	if o.PartSize == 0 {
		o.PartSize = 16 << 20
	}
	if o.UploadConcurrency == 0 {
		o.UploadConcurrency = 4
	}
	if o.Compression == "" {
		o.Compression = encodingZstd
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o
}

func (o *Options) retrier() retrier {
	return retrier{attempts: o.MaxAttempts, base: o.RetryBaseDelay, max: o.RetryMaxDelay, timeout: o.RequestTimeout}
}

// Store is a checkpoint location opened by URL. It is safe for concurrent
// use; each partition is handled through its own *Partition.
type Store struct {
	url     string
	opts    Options
	log     *slog.Logger
	bkt     bucket
	retry   retrier
	metrics *metrics

	reportMu sync.Mutex
	reported map[string]bool // corrupt objects logged (partial.go)
}

// Open opens a checkpoint location:
//
//	s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1
//	file:///var/lib/bloomgate/checkpoints
//	mem://name   (process-local; two Opens of the same name share objects)
//
// For s3, credentials come from the standard AWS chain (environment,
// shared config, IAM role); with endpoint set, path-style addressing is used.
// Open does not contact the store.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	loc, err := parseLocation(rawURL)
	if err != nil {
		return nil, err
	}
	bkt, err := openBucket(ctx, loc, &opts)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", RedactURL(rawURL), err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		bkt.Close()
		return nil, err
	}
	return &Store{
		url:     RedactURL(rawURL),
		opts:    opts,
		log:     opts.Logger.With("checkpoint_store", RedactURL(rawURL)),
		bkt:     bkt,
		retry:   opts.retrier(),
		metrics: m,
	}, nil
}

// RedactURL returns raw fit for logs and errors. A checkpoint URL may
// carry a secret anywhere a user can type one: in its user information, in
// a query parameter (a mistyped `?aws_secret_access_key=…` is refused as
// unknown, and the refusal must not repeat it) or in its fragment. So it
// keeps the scheme, host and path, the values of the parameters the stores
// take (harmlessParams; an endpoint loses its own user information) and
// the names of the others, and replaces every other value, and a name
// that does not look like one, with REDACTED. A URL that does not parse
// keeps its scheme only.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		scheme, _, ok := strings.Cut(raw, ":")
		if !ok || !validScheme(scheme) {
			return "(a URL that does not parse; not shown)"
		}
		return scheme + ":(a URL that does not parse; not shown)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = redactQuery(u.RawQuery)
		u.ForceQuery = false
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = redacted, ""
	}
	return u.String()
}

const redacted = "REDACTED"

// harmlessParams are the query parameters some store takes (parseLocation)
// whose values are no secret.
var harmlessParams = map[string]bool{"region": true, "endpoint": true}

// redactQuery keeps the query's parameters in their order, with the values
// of harmlessParams and the names of the others (see RedactURL).
func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, part := range parts {
		name, value, hasValue := strings.Cut(part, "=")
		key, err := url.QueryUnescape(name)
		if err != nil || !plainName(key) {
			parts[i] = redacted
			continue
		}
		switch {
		case !hasValue || value == "":
		case key == "endpoint":
			parts[i] = name + "=" + redactEndpoint(value)
		case harmlessParams[key]:
		default:
			parts[i] = name + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

// redactEndpoint drops the user information of an endpoint URL.
func redactEndpoint(value string) string {
	v, err := url.QueryUnescape(value)
	if err != nil {
		return redacted
	}
	eu, err := url.Parse(v)
	if err != nil {
		return redacted
	}
	if eu.User == nil && eu.RawQuery == "" && eu.Fragment == "" {
		return value
	}
	eu.User = nil
	if eu.RawQuery != "" {
		eu.RawQuery = redactQuery(eu.RawQuery)
	}
	if eu.Fragment != "" {
		eu.Fragment, eu.RawFragment = redacted, ""
	}
	return eu.String()
}

// plainName: letters, digits, '_', '-', '.' — a parameter name, not a
// secret typed where a name goes.
func plainName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func validScheme(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}

// URL is the location the store was opened with, redacted (RedactURL).
func (s *Store) URL() string { return s.url }

// Close releases the store's connections. Partitions must not be used after.
func (s *Store) Close() error { return s.bkt.Close() }

// Partition returns the handle for one (consumer group, topic, partition).
// Each owner of a partition uses one handle: Restore, then Claim, then
// Commit periodically. A handle is not for concurrent use.
func (s *Store) Partition(group, topic string, partition int) *Partition {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	p := &Partition{
		s:         s,
		group:     group,
		topic:     topic,
		partition: partition,
		dir:       partitionDir(group, topic, partition),
		writer:    hex.EncodeToString(nonce[:]),
		log:       s.log.With("group", group, "topic", topic, "partition", partition),
	}
	p.m = s.metrics.partition(topic, partition)
	return p
}

// partitionDir is "<group>/<topic>/<partition>" with each name path-escaped,
// so that any group or topic name maps to exactly one directory.
func partitionDir(group, topic string, partition int) string {
	return escapeName(group) + "/" + escapeName(topic) + "/" + strconv.Itoa(partition)
}

func escapeName(s string) string {
	e := url.PathEscape(s)
	switch e {
	case "":
		return "%00" // never a real name: keeps the layout unambiguous
	case ".", "..":
		return strings.ReplaceAll(e, ".", "%2E")
	}
	return e
}

func unescapeName(s string) (string, error) {
	if s == "%00" {
		return "", nil
	}
	return url.PathUnescape(s)
}

// Partition is the checkpoint handle of one partition's owner.
type Partition struct {
	s         *Store
	group     string
	topic     string
	partition int
	dir       string
	writer    string
	log       *slog.Logger
	m         *partitionMetrics

	mu       sync.Mutex
	headSeq  uint64    // newest sequence seen by Restore (0: none)
	restored *Manifest // what Restore loaded (nil: nothing)
	listed   bool      // Restore or Claim listed the manifests
	seq      uint64    // sequence of the last manifest this handle wrote
	last     *Manifest // the last manifest this handle wrote or restored
	claimed  bool
	fenced   bool
	cache    map[uint64]*Manifest // manifests read by retention
	// unsure is a manifest whose create-only write answered "exists" and
	// could not be read back: it may be ours (a lost answer) or another
	// writer's. The next Commit settles it before anything else.
	unsure *unsureManifest
	// missing are the objects reported missing since the last successful
	// commit (presence.go).
	missing map[string]bool
}

type unsureManifest struct {
	m    *Manifest
	data []byte
}

func manifestKey(dir string, seq uint64) string {
	return fmt.Sprintf("%s/manifests/%020d.json", dir, seq)
}

// parseManifestKey returns the sequence of a key "<dir>/manifests/<seq>.json".
func parseManifestKey(dir, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, dir+"/manifests/")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, ".json")
	if !ok || len(num) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	if err != nil || seq == 0 {
		return 0, false
	}
	return seq, true
}

// readManifest fetches and verifies manifest seq.
func (p *Partition) readManifest(ctx context.Context, seq uint64) (*Manifest, error) {
	data, err := p.s.readSmall(ctx, manifestKey(p.dir, seq))
	if err != nil {
		if errors.Is(err, errNotExist) {
			return nil, fmt.Errorf("%w: manifest %d vanished: %w", ErrCorrupt, seq, err)
		}
		return nil, &storageError{fmt.Errorf("reading manifest %d: %w", seq, err)}
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("manifest %d: %w", seq, err)
	}
	if m.Seq != seq || m.Group != p.group || m.Topic != p.topic || m.Partition != p.partition {
		return nil, fmt.Errorf("%w: manifest %d names %s/%s/%d seq %d", ErrCorrupt, seq, m.Group, m.Topic, m.Partition, m.Seq)
	}
	return m, nil
}

// readSmall reads a whole small object with retries.
func (s *Store) readSmall(ctx context.Context, key string) ([]byte, error) {
	var data []byte
	err := s.retry.do(ctx, func(ctx context.Context) error {
		rc, err := s.bkt.Get(ctx, key, 0)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
		if err != nil {
			return transient(err)
		}
		return nil
	})
	return data, err
}

// Last returns the last manifest this handle restored or wrote (nil if
// none), for status pages and staleness checks; callers must not modify it.
func (p *Partition) Last() *Manifest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Fenced reports whether this handle lost the partition to another writer.
func (p *Partition) Fenced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenced
}

// Ping checks that the location answers and can be listed (for readiness
// probes): one LIST of a prefix that holds nothing. A missing bucket or
// missing permissions are errors.
func (s *Store) Ping(ctx context.Context) error {
	err := s.retry.do(ctx, func(ctx context.Context) error {
		return s.bkt.List(ctx, "bloomgate-ping/", func(objectAttrs) error { return nil })
	})
	if err != nil {
		return fmt.Errorf("checking %s: %w", s.url, err)
	}
	return nil
}
