//go:build !race

package bloom

// raceEnabled: the race detector is on (slow tests do less).
const raceEnabled = false
