// Package bench compares bloomgate's filter with other Go Bloom filters and
// measures snapshot pauses and format throughput. It is a separate module so
// that the product does not depend on the libraries it is compared with.
//
// Run (see docs/filter.md for the results and the machine):
//
//	cd bench && go test -run '^$' -bench . -benchtime 1x -timeout 60m
//	BLOOMGATE_BENCH_KEYS=10M,100M go test -run '^$' -bench TestAndAdd -benchtime 1x -timeout 120m
package bench
