package bloom

// PlannedBytes is the memory a shard of this configuration holds once all
// its G generations are open at their planned size (no overflow stacks):
// what an operator should budget per partition. 0 if the configuration is
// invalid.
func (c Config) PlannedBytes() uint64 {
	if c.Validate() != nil {
		return 0
	}
	p := c.plan()
	return p.nblocks * blockBits / 8 * uint64(c.Generations)
}
