//go:build race

package fetcher

// poisonReleased: under the race detector (make test) released record
// sets are overwritten at once, so that a test reading a record after
// its chunk was released sees 0xA5 bytes instead of passing by luck.
const poisonReleased = true
