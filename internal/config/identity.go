package config

import (
	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
)

// KeyIdentity is what defines a key under these settings, as checkpoints
// record it: --key, --normalize, the URL rules (expanded and in their
// canonical order, so that a preset and its rules are one definition)
// and the filter's hash. With --repartition the dedup stage reads keys
// the first hop made ("repartition(<key>)").
func (c *Run) KeyIdentity() checkpoint.KeyIdentity {
	id := checkpoint.KeyIdentity{Spec: c.Key, Normalize: c.Normalize, Hash: bloom.HashName}
	if r, err := c.urlRules(); err == nil { // Validate refused the others
		id.URLRules, id.URLStripParams = r.Names(), r.StripParams()
	}
	if c.Repartition {
		id.Spec = "repartition(" + c.Key + ")"
	}
	return id
}
