package memory

import "github.com/bloomgate/bloomgate/internal/checkpoint"

// Compatible reports whether a restore would refuse checkpoint m for what
// defines a key or for its filter kind, with the error the restore gives
// (an *IncompatibleError); nil if it would take it. For a preflight, which
// reads manifests without restoring.
func (s *Store) Compatible(m *checkpoint.Manifest) error { return s.compatible(m) }
