// Package quantity writes values for people, one way everywhere: --help,
// the start-up log, bloomgate dev, inspect and check, the status page.
//
// Settings are written as a user types them, so that what is shown can be
// pasted back: Duration (24h, 7d, 1h30m), Count (10M, 2500k), Rate (0.01),
// Size (1MiB); internal/config reads these forms back. Measurements are
// rounded to three significant digits with a unit: Bytes (21.3 MiB),
// Approx (2.43 M), PerSecond, Percent (0.006 %), Elapsed (3 m 10 s), Age.
package quantity
