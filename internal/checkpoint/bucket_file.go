package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// tmpPrefix marks files being written; List skips them.
const tmpPrefix = ".tmp."

// The modes of the files and directories a fileBucket creates: the owner
// only (see fileBucket).
const (
	fileMode = 0o600
	dirMode  = 0o700
)

// fileBucket stores objects as files under a root directory. Writes go to a
// temporary file in the target directory, are fsynced, then published with
// rename (replace) or link (create-only: link fails if the name exists, which
// is atomic on POSIX file systems), and the directory is fsynced.
//
// Files are created 0600 and directories 0700 (fileMode, dirMode), less
// whatever the umask removes: a manifest holds the memory's secret hash
// seed, which lets whoever reads it craft keys that collide with chosen
// ones. Files and directories that exist are left as they are (a
// directory created by an older version, 0755, stays so; see
// docs/checkpoints.md).
type fileBucket struct {
	root string
}

// openFile does not create dir: the first write does, so that inspecting a
// mistyped location reports it empty instead of creating it.
func openFile(dir string) (*fileBucket, error) {
	return &fileBucket{root: filepath.Clean(dir)}, nil
}

func (b *fileBucket) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") {
		return "", fmt.Errorf("invalid object key %q", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, tmpPrefix) {
			return "", fmt.Errorf("invalid object key %q", key)
		}
	}
	return filepath.Join(b.root, filepath.FromSlash(key)), nil
}

func (b *fileBucket) Get(ctx context.Context, key string, off int64) (io.ReadCloser, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", key, errNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
	}
	return f, nil
}

func (b *fileBucket) Put(ctx context.Context, key string, r io.Reader, createOnly bool) (n int64, err error) {
	p, err := b.path(key)
	if err != nil {
		return 0, err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, tmpPrefix+filepath.Base(p)+"."+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		os.Remove(tmp) // after link, or on failure; harmless after rename
	}()
	n, err = io.Copy(f, ctxReader{ctx: ctx, r: r})
	if err != nil {
		return 0, fmt.Errorf("put %s: writing: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("put %s: fsync: %w", key, err)
	}
	if err := f.Close(); err != nil {
		f = nil
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	f = nil
	if createOnly {
		if err := os.Link(tmp, p); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return 0, fmt.Errorf("put %s: %w", key, errExists)
			}
			return 0, fmt.Errorf("put %s: publishing: %w", key, err)
		}
	} else if err := os.Rename(tmp, p); err != nil {
		return 0, fmt.Errorf("put %s: publishing: %w", key, err)
	}
	if err := syncDir(dir); err != nil {
		return 0, fmt.Errorf("put %s: fsync directory: %w", key, err)
	}
	return n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (b *fileBucket) List(ctx context.Context, prefix string, fn func(objectAttrs) error) error {
	// Walk from the deepest directory the prefix names completely.
	start := b.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(b.root, filepath.FromSlash(prefix[:i]))
	}
	var attrs []objectAttrs
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking, or nothing stored yet
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		rel, err := filepath.Rel(b.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		attrs = append(attrs, objectAttrs{Key: key, Size: info.Size(), Modified: info.ModTime()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing %s: %w", prefix, err)
	}
	sort.Slice(attrs, func(i, j int) bool { return attrs[i].Key < attrs[j].Key })
	for _, a := range attrs {
		if err := fn(a); err != nil {
			return err
		}
	}
	return nil
}

func (b *fileBucket) Delete(ctx context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

func (b *fileBucket) Attributes(ctx context.Context, key string) (objectAttrs, error) {
	p, err := b.path(key)
	if err != nil {
		return objectAttrs{}, err
	}
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return objectAttrs{}, fmt.Errorf("attributes %s: %w", key, errNotExist)
	}
	if err != nil {
		return objectAttrs{}, fmt.Errorf("attributes %s: %w", key, err)
	}
	return objectAttrs{Key: key, Size: info.Size(), Modified: info.ModTime()}, nil
}

func (b *fileBucket) Close() error { return nil }

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
