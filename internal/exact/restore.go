package exact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/bloomgate/bloomgate/internal/errmark"
)

// ErrCorrupt means a checkpoint cannot be restored: a file's size or digest
// differs from its description, the description itself is malformed, or
// the files do not form a store. Fall back to an older checkpoint. It is
// errmark.ErrCorrupt in the exact store's words.
var ErrCorrupt = errmark.Corrupt("exact store: corrupt checkpoint")

// OpenFunc opens one checkpoint file for reading (from the bucket).
type OpenFunc func(ctx context.Context, f File) (io.ReadCloser, error)

// restoreConcurrency bounds parallel downloads during Restore.
const restoreConcurrency = 4

// Restore makes dir hold exactly the checkpoint described by files and
// opens it. A file already in dir with the described size and digest is
// kept (the local directory is a cache of the bucket); every other entry
// is removed; missing files are read through open, verified as they are
// written, and renamed into place.
//
// Errors: ErrCorrupt (fall back to an older checkpoint); errors from open
// or its readers are returned wrapped as they are (the caller knows
// whether "not found" or "unavailable"); ctx's error when it ends. No
// store may have dir open.
func Restore(ctx context.Context, dir string, files []File, open OpenFunc, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	want, err := checkFiles(files)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("restoring exact store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("restoring exact store: %w", err)
	}
	missing, err := prune(dir, want)
	if err == nil {
		err = fetch(ctx, dir, missing, open)
	}
	if uerr := lock.Close(); uerr != nil && err == nil {
		err = fmt.Errorf("restoring exact store: unlocking %s: %w", dir, uerr)
	}
	if err != nil {
		return nil, err
	}
	known := make(map[string]File)
	for _, f := range files {
		known[f.Name] = f
	}
	s, err := openStore(dir, opts, known, true)
	switch {
	case err == nil:
	case errors.Is(err, errMalformed), errors.Is(err, fs.ErrNotExist):
		// The files matched their digests: what they say is wrong, or
		// their manifest names a run the checkpoint does not list.
		return nil, fmt.Errorf("%w: restored files do not open: %w", ErrCorrupt, err)
	default:
		// The machine's (mmap, open, lock, metrics): the checkpoint may be
		// sound, so not a reason to fall back to an older one.
		return nil, fmt.Errorf("restoring exact store: opening the restored files: %w", err)
	}
	return s, nil
}

// checkFiles validates a checkpoint's description: names that stay inside
// the directory, no duplicates, plausible sizes and digests.
func checkFiles(files []File) (map[string]File, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no files", ErrCorrupt)
	}
	want := make(map[string]File, len(files))
	for _, f := range files {
		if !validName(f.Name) {
			return nil, fmt.Errorf("%w: file name %q", ErrCorrupt, f.Name)
		}
		if _, dup := want[f.Name]; dup {
			return nil, fmt.Errorf("%w: file %q listed twice", ErrCorrupt, f.Name)
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("%w: file %q has size %d", ErrCorrupt, f.Name, f.Size)
		}
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%w: file %q has digest %q: want 64 hex digits", ErrCorrupt, f.Name, f.SHA256)
		}
		want[f.Name] = f
	}
	return want, nil
}

// validName accepts the store's file names (MANIFEST, run files): no
// separators, no "..", nothing the store or Restore use themselves.
func validName(name string) bool {
	if name == "" || len(name) > 255 || name[0] == '.' || name == lockFile || name == snapshotsDir || filepath.Ext(name) == restoringExt {
		return false
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}

// restoringExt marks a file being written by Restore.
const restoringExt = ".restoring"

// prune removes what dir holds beyond want, keeps files that match their
// description, and returns the files still to fetch.
func prune(dir string, want map[string]File) ([]File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("restoring exact store: %w", err)
	}
	have := make(map[string]bool)
	for _, e := range ents {
		name := e.Name()
		if name == lockFile {
			continue
		}
		path := filepath.Join(dir, name)
		if f, ok := want[name]; ok && e.Type().IsRegular() {
			if sum, n, err := hashFile(path); err == nil && n == f.Size && sum == f.SHA256 {
				have[name] = true
				continue
			}
		}
		if err := os.RemoveAll(path); err != nil {
			return nil, fmt.Errorf("restoring exact store: removing %s: %w", path, err)
		}
	}
	var missing []File
	for name, f := range want {
		if !have[name] {
			missing = append(missing, f)
		}
	}
	return missing, nil
}

// fetch writes files into dir, restoreConcurrency at a time; the first
// error stops the rest.
func fetch(ctx context.Context, dir string, files []File, open OpenFunc) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan File)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range min(restoreConcurrency, len(files)) {
		wg.Go(func() {
			for f := range work {
				if err := fetchOne(ctx, dir, f, open); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
				}
			}
		})
	}
feed:
	for _, f := range files {
		select {
		case work <- f:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = fmt.Errorf("restoring exact store: %w", context.Cause(ctx))
	}
	return firstErr
}

func fetchOne(ctx context.Context, dir string, f File, open OpenFunc) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, err := open(ctx, f)
	if err != nil {
		return fmt.Errorf("restoring exact store file %s: %w", f.Name, err)
	}
	defer r.Close()
	tmp := filepath.Join(dir, f.Name+restoringExt)
	out, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("restoring exact store: %w", err)
	}
	defer func() {
		if out != nil {
			_ = out.Close()
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	h := sha256.New()
	// One byte more than described reveals a longer file.
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(r, f.Size+1))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("restoring exact store file %s: %w", f.Name, err)
	}
	if n != f.Size {
		return fmt.Errorf("%w: file %s has %d bytes, want %d", ErrCorrupt, f.Name, n, f.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
		return fmt.Errorf("%w: file %s: SHA-256 %s, want %s", ErrCorrupt, f.Name, sum, f.SHA256)
	}
	cerr := out.Close()
	out = nil
	if cerr != nil {
		return fmt.Errorf("restoring exact store: %w", cerr)
	}
	if err := os.Rename(tmp, filepath.Join(dir, f.Name)); err != nil {
		return fmt.Errorf("restoring exact store: %w", err)
	}
	return nil
}
