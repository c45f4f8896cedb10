package exact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// snapshotsDir holds checkpoint directories inside the store's directory
// (hard links to pebble's files: same file system, no copies).
const snapshotsDir = "checkpoints"

// File is one file of a checkpoint: its name inside the store directory,
// its size and the SHA-256 of its bytes (hex). Two files with the same
// name, size and digest have the same bytes, so a file that an earlier
// checkpoint already uploaded is referenced instead of uploaded again
// (NewFiles). Tables (*.sst) are immutable, which is why most of a
// checkpoint is usually already in the bucket; the manifest, options and
// marker files are small and change.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Snapshot is a checkpoint of a store: the files that, restored into an
// empty directory, reproduce it, plus what it holds. Its files stay
// readable (Open) until Release, also while the store goes on adding,
// compacting and dropping.
type Snapshot struct {
	// Files, sorted by name.
	Files []File
	// Generations present and the floor, as Generations and Floor would
	// have returned them at the checkpoint.
	Generations []uint64
	Floor       uint64

	dir string
}

// Bytes is the total size of the snapshot's files.
func (sn *Snapshot) Bytes() int64 {
	var n int64
	for _, f := range sn.Files {
		n += f.Size
	}
	return n
}

// Open reads one of the snapshot's files.
func (sn *Snapshot) Open(name string) (io.ReadCloser, error) {
	if sn.dir == "" {
		return nil, errors.New("exact store checkpoint already released")
	}
	if _, ok := slices.BinarySearchFunc(sn.Files, name, func(f File, n string) int { return strings.Compare(f.Name, n) }); !ok {
		return nil, fmt.Errorf("exact store checkpoint has no file %q", name)
	}
	return os.Open(filepath.Join(sn.dir, name))
}

// Release deletes the snapshot's local directory (hard links: the store's
// own files are not affected). Call it when the upload is done.
func (sn *Snapshot) Release() error {
	if sn.dir == "" {
		return nil
	}
	err := os.RemoveAll(sn.dir)
	sn.dir = ""
	return err
}

// NewFiles returns the files of cur that are not in prev (same name, size
// and digest): what a checkpoint must upload when prev is what the bucket
// holds already.
func NewFiles(cur, prev []File) []File {
	have := make(map[File]bool, len(prev))
	for _, f := range prev {
		have[f] = true
	}
	var out []File
	for _, f := range cur {
		if !have[f] {
			out = append(out, f)
		}
	}
	return out
}

// Checkpoint captures the store as it is when Checkpoint is called: every
// Add and DropBefore that returned before is in it, none that starts
// after. Call it where the caller's own state is cut (after a processed
// batch, with the input offset it covers).
//
// Adds and lookups go on during the checkpoint: while pebble flushes its
// memtable and links the files (the cut, typically tens to hundreds of
// milliseconds), adds are held in memory, visible to lookups, and applied
// afterwards. Then the new files are hashed (tables once per store, the
// small metadata files every time). One checkpoint runs at a time.
func (s *Store) Checkpoint(ctx context.Context) (*Snapshot, error) {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.cpSeq++
	dir := filepath.Join(s.dir, snapshotsDir, fmt.Sprintf("%06d", s.cpSeq))
	start := time.Now()
	s.mu.Lock()
	if err := s.applyLocked(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.cutting = true
	sn := &Snapshot{Generations: slices.Clone(s.gens), Floor: s.floor, dir: dir}
	s.mu.Unlock()

	err := s.db.Flush()
	if err == nil {
		err = s.db.Checkpoint(dir)
	}

	s.mu.Lock()
	s.cutting = false
	if err != nil {
		err = s.fail(fmt.Errorf("exact store checkpoint: %w", err))
	} else {
		err = s.applyLocked()
	}
	s.mu.Unlock()
	s.m.cut.Observe(time.Since(start).Seconds())
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if sn.Files, err = s.describe(ctx, dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("exact store checkpoint: %w", err)
	}
	return sn, nil
}

// describe lists dir's files with sizes and digests. Tables keep their
// digest for the store's lifetime: pebble never reuses a file number while
// the store is open, and tables never change.
func (s *Store) describe(ctx context.Context, dir string) ([]File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := make([]File, 0, len(ents))
	tables := make(map[string]File)
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("unexpected entry %q in checkpoint directory", e.Name())
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		name := e.Name()
		table := strings.HasSuffix(name, ".sst")
		f, ok := s.sums[name]
		if !table || !ok || f.Size != info.Size() {
			sum, n, err := hashFile(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			f = File{Name: name, Size: n, SHA256: sum}
		}
		if table {
			tables[name] = f
		}
		files = append(files, f)
	}
	// Tables compacted away are never named again: forget them.
	s.sums = tables
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
