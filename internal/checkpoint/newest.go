package checkpoint

import (
	"context"
	"errors"
	"fmt"
)

// Newest reads the partition's newest manifest that holds state: the
// one Restore tries first, skipping empty claims and manifests that do
// not verify (their number is returned in skipped). It reads manifests
// only, neither generation objects nor anything that fences: a preflight
// may call it while a worker owns the partition. ErrNoCheckpoint: the
// partition has no manifest with state. A manifest that cannot be read
// for another reason than corruption is an error.
func (p *Partition) Newest(ctx context.Context) (m *Manifest, skipped int, err error) {
	seqs, err := p.listManifestsRetry(ctx)
	if err != nil {
		return nil, 0, err
	}
	for i := len(seqs) - 1; i >= 0; i-- {
		m, err := p.readManifest(ctx, seqs[i])
		switch {
		case errors.Is(err, ErrCorrupt):
			skipped++
			continue
		case err != nil:
			return nil, skipped, fmt.Errorf("%s/%s/%d: %w", p.group, p.topic, p.partition, err)
		case m.Empty:
			continue
		}
		return m, skipped, nil
	}
	return nil, skipped, ErrNoCheckpoint
}
