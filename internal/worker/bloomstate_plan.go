package worker

// PlannedBytes is the memory of one partition's filter with every
// generation open at its planned size (overflow stacks not included).
func (s *BloomState) PlannedBytes(p FilterParams) uint64 {
	return bloomConfig(p).PlannedBytes()
}
