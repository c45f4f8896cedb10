//go:build !race

package fetcher

const poisonReleased = false
