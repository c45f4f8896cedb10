package config

import (
	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
)

// KeyIdentity is what defines a key under these settings, as checkpoints
// record it: --key, --normalize and the filter's hash. With --repartition
// the dedup stage reads keys the first hop made ("repartition(<key>)").
func (c *Run) KeyIdentity() checkpoint.KeyIdentity {
	id := checkpoint.KeyIdentity{Spec: c.Key, Normalize: c.Normalize, Hash: bloom.HashName}
	if c.Repartition {
		id.Spec = "repartition(" + c.Key + ")"
	}
	return id
}
