//go:build race

package fetcher

const raceOn = true
