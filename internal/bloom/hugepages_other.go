//go:build !(linux && (amd64 || arm64))

package bloom

func adviseHugePages([]uint64) {}
