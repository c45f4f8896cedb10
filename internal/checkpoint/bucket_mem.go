package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// memStore holds the named in-memory buckets of the process, so that two
// Opens of mem://name (two "workers" in one test) share their objects.
var memStore = struct {
	sync.Mutex
	buckets map[string]*memData
}{buckets: map[string]*memData{}}

type memData struct {
	mu      sync.Mutex
	objects map[string]memObject
}

type memObject struct {
	data     []byte
	modified time.Time
}

type memBucket struct {
	d      *memData
	prefix string
}

// openMem returns the named bucket (created on first use); an empty name
// gives a private bucket.
func openMem(name, prefix string) *memBucket {
	memStore.Lock()
	defer memStore.Unlock()
	d := memStore.buckets[name]
	if d == nil {
		d = &memData{objects: map[string]memObject{}}
		if name != "" {
			memStore.buckets[name] = d
		}
	}
	return &memBucket{d: d, prefix: prefix}
}

func (b *memBucket) Get(ctx context.Context, key string, off int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.d.mu.Lock()
	o, ok := b.d.objects[joinKey(b.prefix, key)]
	b.d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, errNotExist)
	}
	if off > int64(len(o.data)) {
		off = int64(len(o.data))
	}
	return io.NopCloser(bytes.NewReader(o.data[off:])), nil
}

func (b *memBucket) Put(ctx context.Context, key string, r io.Reader, createOnly bool) (int64, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	k := joinKey(b.prefix, key)
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	if _, ok := b.d.objects[k]; ok && createOnly {
		return 0, fmt.Errorf("put %s: %w", key, errExists)
	}
	b.d.objects[k] = memObject{data: data, modified: time.Now()}
	return int64(len(data)), nil
}

func (b *memBucket) List(ctx context.Context, prefix string, fn func(objectAttrs) error) error {
	full := joinKey(b.prefix, prefix)
	if b.prefix != "" && prefix == "" {
		full = b.prefix + "/"
	}
	b.d.mu.Lock()
	var attrs []objectAttrs
	for k, o := range b.d.objects {
		if strings.HasPrefix(k, full) {
			rel := k
			if b.prefix != "" {
				rel = strings.TrimPrefix(k, b.prefix+"/")
			}
			attrs = append(attrs, objectAttrs{Key: rel, Size: int64(len(o.data)), Modified: o.modified})
		}
	}
	b.d.mu.Unlock()
	sort.Slice(attrs, func(i, j int) bool { return attrs[i].Key < attrs[j].Key })
	for _, a := range attrs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(a); err != nil {
			return err
		}
	}
	return nil
}

func (b *memBucket) Delete(ctx context.Context, key string) error {
	b.d.mu.Lock()
	delete(b.d.objects, joinKey(b.prefix, key))
	b.d.mu.Unlock()
	return ctx.Err()
}

func (b *memBucket) Attributes(ctx context.Context, key string) (objectAttrs, error) {
	b.d.mu.Lock()
	o, ok := b.d.objects[joinKey(b.prefix, key)]
	b.d.mu.Unlock()
	if !ok {
		return objectAttrs{}, fmt.Errorf("attributes %s: %w", key, errNotExist)
	}
	return objectAttrs{Key: key, Size: int64(len(o.data)), Modified: o.modified}, nil
}

func (b *memBucket) Close() error { return nil }
