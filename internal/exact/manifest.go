package exact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// manifestName is the store's manifest inside its directory and in every
// checkpoint: the layout, the floor, and the runs that hold the store.
const manifestName = "MANIFEST"

// LayoutName names the store's format (run files and manifest). A store
// records it, and Open and Restore refuse another.
const LayoutName = "bloomgate-exact-runs-v1"

type manifest struct {
	Layout string `json:"layout"`
	// Floor: generations below it are dropped.
	Floor uint64 `json:"floor"`
	// NextSeq numbers the next run file, so that names are not reused
	// while the store lives (its checkpoints included).
	NextSeq uint64      `json:"next_seq"`
	Runs    []runRecord `json:"runs"`
}

type runRecord struct {
	Name string `json:"name"`
	Gen  uint64 `json:"generation"`
	Keys int    `json:"keys"`
}

func runName(gen, seq uint64) string { return fmt.Sprintf("%016x-%010d%s", gen, seq, runExt) }

func encodeManifest(m *manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// readManifest reads and checks dir's manifest.
func readManifest(dir string) (*manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	return decodeManifest(b)
}

// maxManifestBytes bounds what decodeManifest accepts (about 100 bytes per
// run; a store has tens of runs).
const maxManifestBytes = 1 << 20

func decodeManifest(b []byte) (*manifest, error) {
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes", errMalformed, len(b))
	}
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", errMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: manifest: data after the object", errMalformed)
	}
	if m.Layout != LayoutName {
		return nil, fmt.Errorf("store layout %q: this build reads %q", m.Layout, LayoutName)
	}
	seen := make(map[string]bool, len(m.Runs))
	for _, r := range m.Runs {
		if !validName(r.Name) || !strings.HasSuffix(r.Name, runExt) || seen[r.Name] {
			return nil, fmt.Errorf("%w: manifest lists run %q", errMalformed, r.Name)
		}
		if r.Gen < m.Floor {
			return nil, fmt.Errorf("%w: manifest lists run %s of generation %d below the floor %d", errMalformed, r.Name, r.Gen, m.Floor)
		}
		seen[r.Name] = true
	}
	return &m, nil
}

// writeManifest writes m to dir atomically (temporary file, rename).
func writeManifest(dir string, m *manifest) error {
	b, err := encodeManifest(m)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, manifestName+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, manifestName))
}
