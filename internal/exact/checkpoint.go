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
// (hard links to the run files: same file system, no copies).
const snapshotsDir = "checkpoints"

// File is one file of a checkpoint: its name inside the store directory,
// its size and the SHA-256 of its bytes (hex). Two files with the same
// name, size and digest have the same bytes, so a file that an earlier
// checkpoint already uploaded is referenced instead of uploaded again
// (NewFiles). Run files (*.run) never change; the manifest (MANIFEST) is
// small and changes with every checkpoint.
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
	// Keys counts the hashes in the snapshot's runs (a hash in two runs of
	// a generation not merged yet counts twice).
	Keys int64

	dir   string
	store *Store // describes the files
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
// batch, with the input offset it covers). It is Cut followed by
// Describe.
//
// The cut writes the held adds as runs and hard-links the run files and a
// manifest into a checkpoint directory; adds and lookups wait for it
// (milliseconds to tens of milliseconds: one flush). Then the new files
// are hashed while the store goes on (run files once per store, the
// manifest every time).
func (s *Store) Checkpoint(ctx context.Context) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sn, err := s.Cut()
	if err != nil {
		return nil, err
	}
	if err := sn.Describe(ctx); err != nil {
		_ = sn.Release()
		return nil, err
	}
	return sn, nil
}

// Cut is the part of Checkpoint that must happen where the caller's state
// is cut: it captures the store (the same prefix of adds and drops as
// Checkpoint) and returns a snapshot whose Files are not known yet. Call
// Describe before reading Files or opening them; it may run on another
// goroutine while the store goes on (the owner of a partition cuts, its
// uploader describes).
func (s *Store) Cut() (*Snapshot, error) {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.cpSeq++
	dir := filepath.Join(s.dir, snapshotsDir, fmt.Sprintf("%06d", s.cpSeq))
	start := time.Now()
	sn, err := s.cut(dir)
	s.m.cut.Observe(time.Since(start).Seconds())
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("exact store checkpoint: %w", err)
	}
	sn.store = s
	return sn, nil
}

// Describe lists the snapshot's files with their sizes and digests in
// Files. A snapshot from Checkpoint is described already; describing again
// changes nothing.
func (sn *Snapshot) Describe(ctx context.Context) error {
	if sn.Files != nil {
		return nil
	}
	if sn.dir == "" {
		return errors.New("exact store checkpoint already released")
	}
	files, err := sn.store.describe(ctx, sn.dir)
	if err != nil {
		return fmt.Errorf("exact store checkpoint: %w", err)
	}
	sn.Files = files
	return nil
}

// cut flushes held adds and links the store's files into dir.
func (s *Store) cut(dir string) (*Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.flushLocked(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m := s.manifestLocked()
	keys := int64(0)
	for _, r := range m.Runs {
		if err := os.Link(filepath.Join(s.dir, r.Name), filepath.Join(dir, r.Name)); err != nil {
			return nil, err
		}
		keys += int64(r.Keys)
	}
	if err := writeManifest(dir, m); err != nil {
		return nil, err
	}
	return &Snapshot{Generations: slices.Clone(s.live), Floor: s.floor, Keys: keys, dir: dir}, nil
}

// describe lists dir's files with sizes and digests. A run file keeps its
// digest for the store's lifetime: run names are not reused while it
// lives, and runs never change. Describes run one at a time.
func (s *Store) describe(ctx context.Context, dir string) ([]File, error) {
	s.sumsMu.Lock()
	defer s.sumsMu.Unlock()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := make([]File, 0, len(ents))
	runs := make(map[string]File)
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
		isRun := strings.HasSuffix(name, runExt)
		f, ok := s.sums[name]
		if !isRun || !ok || f.Size != info.Size() {
			sum, n, err := hashFile(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			f = File{Name: name, Size: n, SHA256: sum}
		}
		if isRun {
			runs[name] = f
		}
		files = append(files, f)
	}
	// Runs merged away are never named again: forget them.
	s.sums = runs
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
