package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/buildinfo"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/quantity"
)

// The terminal output of `bloomgate dev`: the header and progress lines on
// stderr, the summary and the hints on stdout.

func writeDevHeader(w io.Writer, d *demo) {
	sc, o, cfg := d.sc, d.opts, d.cfg
	fmt.Fprintf(w, "bloomgate dev (version %s): broker, worker and demo producer in one process\n", buildinfo.String())
	fmt.Fprintf(w, "  broker       %s (in-process, memory only), topics %s/%s/%s/%s with %d partitions\n",
		d.brokerAddr, sc.input, sc.output, sc.duplicates, sc.deadLetter, o.partitions)
	key := sc.key
	if sc.normalize != "none" {
		key += ", normalize " + sc.normalize
	}
	if sc.repartition {
		fmt.Fprintf(w, "  hop          --repartition: group %s re-keys %s by the hash of the canonical URL into %s\n",
			cfg.RepartitionTopic(), sc.input, cfg.RepartitionTopic())
	}
	fmt.Fprintf(w, "  worker       group %s, key %s, capacity %s keys, fpr %s, window %s\n", devGroup, key,
		quantity.Count(cfg.Capacity), quantity.Rate(cfg.FPR), quantity.Duration(cfg.Window))
	if cfg.Exact {
		fmt.Fprintf(w, "  exact mode   the filter's positives are confirmed in a store of key hashes in %s\n", cfg.ExactDir)
	}
	fmt.Fprintf(w, "  checkpoints  %s (every %s and at shutdown)\n", d.cpURL, quantity.Duration(cfg.CheckpointInterval))
	if d.metricsAddr != "" {
		fmt.Fprintf(w, "  status       http://%s/  (also /metrics, /status.json, /readyz)\n", d.metricsAddr)
	}
	if sc.repartition {
		fmt.Fprintf(w, "  producer     %d link events from %d fetchers, keyed by source host, %.0f%% duplicates, rate %s\n\n",
			o.events, o.fetchers, 100*o.duplicates, rateText(o.rate))
	} else {
		fmt.Fprintf(w, "  producer     %d order events, %.0f%% duplicates, rate %s\n\n", o.events, 100*o.duplicates, rateText(o.rate))
	}
}

// progress prints one line per tick: rewritten in place on a terminal,
// one line each otherwise.
type progress struct {
	w      io.Writer
	tty    bool
	lw     *lineWriter
	sc     devScenario
	last   time.Time
	lastC  uint64
	active bool
}

func (p *progress) line(start time.Time, produced int64, s devPoll) {
	now := time.Now()
	c := s.counts
	rate := 0.0
	if !p.last.IsZero() && now.Sub(p.last) > 0 {
		rate = float64(c.consumed-p.lastC) / now.Sub(p.last).Seconds()
	} else if d := now.Sub(start); d > 0 {
		rate = float64(c.consumed) / d.Seconds()
	}
	p.last, p.lastC = now, c.consumed
	hop := ""
	if p.sc.repartition {
		hop = fmt.Sprintf("  repartitioned %d", max(s.hopEnd, 0))
	}
	line := fmt.Sprintf("[%5.1fs] produced %d%s  consumed %d  forwarded %d  duplicates %d  dead-lettered %d  %.0f events/s",
		now.Sub(start).Seconds(), produced, hop, c.consumed, c.forwarded, c.duplicates, c.deadLettered, rate)
	p.lw.mu.Lock()
	defer p.lw.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.active = true
		p.lw.open = true
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) finish() {
	p.lw.mu.Lock()
	defer p.lw.mu.Unlock()
	if p.active {
		fmt.Fprintln(p.w)
		p.active = false
		p.lw.open = false
	}
}

// lineWriter serialises log output with the progress line: on a terminal a
// log line first ends the progress line in place.
type lineWriter struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	open bool
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open {
		fmt.Fprint(l.w, "\r\033[K")
		l.open = false
	}
	return l.w.Write(b)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// devSummary is what the summary reports.
type devSummary struct {
	sc    devScenario
	opts  Options
	prog  string
	truth devTruth
	// counts after the worker stopped (or at the drain, for
	// --keep-running); exact: no later batch can be missing from them.
	counts      devCounts
	exact       bool
	inputEnd    int64 // records in the input topic
	hopEnd      int64 // records in the repartition topic
	end         devEnd
	complete    bool // the worker consumed everything written
	cause       error
	keepRunning bool // printed while broker and worker go on
	check       *forwardCheck
	plan        capacityPlan
	fpr         float64
	elapsed     time.Duration
	cpURL       string
	hopTopic    string
	sizes       cpSizes
	metricsAddr string
	// exactMode: the worker ran with --exact; refuted counts the filter's
	// positives its store refuted (false positives forwarded instead).
	exactMode bool
	refuted   uint64
}

// summary collects the summary from the demo's state (d.mu held): at the
// drain for --keep-running, else after the worker stopped.
func (d *demo) summary(keepRunning bool) devSummary {
	p := d.final
	if keepRunning {
		p = d.last
	}
	workerEnd := p.workerEnd(d.sc)
	return devSummary{
		sc: d.sc, opts: d.opts, prog: d.prog, truth: *d.truth,
		counts:      p.counts,
		exact:       keepRunning || p.final || (workerEnd >= 0 && p.counts.consumed >= uint64(workerEnd)),
		inputEnd:    p.inputEnd,
		hopEnd:      p.hopEnd,
		end:         d.end,
		complete:    d.end == endDrained || (d.end == endInterrupted && d.last.complete),
		cause:       d.cause,
		keepRunning: keepRunning,
		check:       d.check,
		plan:        d.plan,
		fpr:         d.cfg.FPR,
		elapsed:     d.elapsed,
		cpURL:       d.cpURL,
		hopTopic:    d.cfg.RepartitionTopic(),
		sizes:       checkpointSizes(d.store),
		metricsAddr: d.metricsAddr,
		exactMode:   d.cfg.Exact,
		refuted:     refutedPositives(d.reg),
	}
}

// refutedPositives sums bloomgate_exact_positives_total{result="refuted"}.
func refutedPositives(g prometheus.Gatherer) uint64 {
	if g == nil {
		return 0
	}
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "bloomgate_exact_positives_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "refuted" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return uint64(n)
}

// writeKeepRunning prints the summary of the demo data and how to go on
// while broker and worker keep running.
func (d *demo) writeKeepRunning() {
	d.mu.Lock()
	s := d.summary(true)
	d.mu.Unlock()
	w := d.stdout
	writeDevSummary(w, s)
	fmt.Fprintf(w, "\nBroker %s and the worker keep running; Ctrl-C stops them (final checkpoints are written then).\n", d.brokerAddr)
	fmt.Fprintf(w, "  kcat -b %s -C -t %s -e -f '%%p %%o %%k %%h %%s\\n' | head\n", d.brokerAddr, d.sc.output)
	if d.sc.repartition {
		fmt.Fprintf(w, "  %s loadgen --brokers %s --topic %s --kind url --key-mode none --count 100000\n", d.prog, d.brokerAddr, d.sc.input)
	} else {
		fmt.Fprintf(w, "  %s loadgen --brokers %s --topic %s --count 100000\n", d.prog, d.brokerAddr, d.sc.input)
	}
	if d.metricsAddr != "" {
		fmt.Fprintf(w, "  open http://%s/ (status page), curl -s http://%s/metrics\n", d.metricsAddr, d.metricsAddr)
	}
}

func writeDevSummary(w io.Writer, s devSummary) {
	c, t, sc := s.counts, s.truth, s.sc
	fmt.Fprintln(w)
	switch {
	case s.end == endDrained && s.keepRunning:
		fmt.Fprintln(w, "Summary of the demo data (every produced event was consumed)")
	case s.end == endDrained:
		fmt.Fprintln(w, "Summary (every produced event was consumed)")
	case s.end == endInterrupted && s.complete:
		fmt.Fprintf(w, "Summary (interrupted: the producer stopped after %d of %d events, and the worker consumed every one of them)\n",
			t.events, t.planned)
	case s.end == endInterrupted:
		fmt.Fprintf(w, "Summary (interrupted: the producer stopped after %d of %d events; the worker stopped before it had consumed them all)\n",
			t.events, t.planned)
	case s.end == endFailed:
		fmt.Fprintf(w, "Summary (stopped early: %v; counts so far)\n", s.cause)
	default:
		fmt.Fprintln(w, "Summary (INCOMPLETE: the worker did not consume every produced event)")
	}
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "  %-20s %s\n", k, fmt.Sprintf(format, a...)) }
	if sc.repartition {
		row("produced", "%d link events from %d fetchers: %d unique %s + %d duplicates (ground truth)",
			t.events, len(t.fetchers), t.unique, sc.keyNoun, t.duplicates)
		row("", "keyed by source host: %d of the duplicates landed in a partition their URL had not reached", t.crossPartition)
		row("", "(a per-partition filter without the hop would have forwarded those again)")
		row("repartitioned", "%d records -> %s, keyed by the hash of the canonical URL", max(s.hopEnd, 0), s.hopTopic)
	} else {
		row("produced", "%d events: %d unique %s + %d duplicates (ground truth)", t.events, t.unique, sc.keyNoun, t.duplicates)
	}
	if extra := s.inputEnd - t.events; extra > 0 {
		row("", "+ %d events of the producer's last write, cut by the interrupt, reached %s uncounted", extra, sc.input)
	}
	switch {
	case !s.complete:
		end := s.inputEnd
		if sc.repartition {
			end = s.hopEnd
		}
		note := "the rest was not processed"
		if !s.exact {
			note = "or more: the worker's last batches before the stop were not observed"
		}
		row("consumed", "%d of the %d events written (%s)", c.consumed, max(end, 0), note)
	case sc.repartition:
		row("consumed", "%d  (the dedup stage, from %s)", c.consumed, s.hopTopic)
	default:
		row("consumed", "%d", c.consumed)
	}
	row("forwarded", "%d  -> %s", c.forwarded, sc.output)
	row("duplicates", "%d  -> %s", c.duplicates, sc.duplicates)
	row("dead-lettered", "%d  -> %s", c.deadLettered, sc.deadLetter)
	if c.dropped > 0 {
		row("dropped", "%d", c.dropped)
	}
	row("conservation", "%s (consumed = forwarded + duplicates + dead-lettered + dropped)",
		okText(c.consumed == c.forwarded+c.duplicates+c.deadLettered+c.dropped))
	writeMeasured(row, s)
	rate := 0.0
	if s.elapsed > 0 {
		rate = float64(c.consumed) / s.elapsed.Seconds()
	}
	row("throughput", "%.0f events/s (%d consumed in %s, producer and worker sharing this machine)", rate, c.consumed, s.elapsed.Round(100*time.Millisecond))
	writePlan(row, s)
	if s.sizes.err != nil {
		row("checkpoints", "%s (could not inspect: %v)", s.cpURL, s.sizes.err)
	} else {
		if s.keepRunning {
			row("checkpoints", "%s (periodic ones so far)", s.cpURL)
		} else {
			row("checkpoints", "%s", s.cpURL)
		}
		if s.sizes.bytes == 0 {
			row("", "%d partitions claimed, no filter state written yet (every %s, and at shutdown)", s.sizes.partitions, devCheckpointInterval)
		} else {
			row("", "%d partitions, %s in the newest checkpoints (%s stored, %d objects), ~%d keys estimated",
				s.sizes.partitions, quantity.Bytes(uint64(s.sizes.bytes)), quantity.Bytes(uint64(s.sizes.storedBytes)), s.sizes.objects, s.sizes.estKeys)
		}
	}
	row("fresh state", "every run writes to a new run-… directory: the demo broker is in memory and")
	row("", "its offsets restart at 0, so old filter state must not be restored (make clean)")
	writeHints(w, s)
}

// writeMeasured reports what was measured against the ground truth: false
// positives, and for the crawler whether each canonical URL was forwarded
// once and what the hop cost.
func writeMeasured(row func(k, format string, a ...any), s devSummary) {
	c, t, sc := s.counts, s.truth, s.sc
	target := 100 * s.fpr
	switch {
	case !s.complete:
		row("false positives", "not measured: the worker stopped before it had consumed every event written")
		return
	case s.inputEnd > t.events:
		row("false positives", "not measured: %d events in %s are not in the ground truth", s.inputEnd-t.events, sc.input)
		return
	case t.unique == 0:
		return
	case !sc.repartition:
		fp := t.unique - int64(c.forwarded)
		switch {
		case fp >= 0 && s.exactMode:
			row("false positives", "%d = unique %s - forwarded (exact mode: the store confirms every positive of the filter)", fp, sc.keyNoun)
			row("", "%d positives of the filter refuted by the store and forwarded (the filter alone: %.4f%% of unique keys, target %g%%)",
				s.refuted, 100*float64(s.refuted)/float64(t.unique), target)
		case fp >= 0:
			row("false positives", "%d = unique %s - forwarded, %.4f%% of unique keys (filter target %g%%)",
				fp, sc.keyNoun, 100*float64(fp)/float64(t.unique), target)
		default:
			row("false positives", "%d: %d more events forwarded than unique keys were written (a replay after a restart?)", fp, -fp)
		}
		return
	}
	k := s.check
	if k == nil || k.err != nil {
		var err error
		if k != nil {
			err = k.err
		}
		row("forwarded once", "not measured: reading %s back failed: %v", sc.output, err)
		return
	}
	row("forwarded once", "%s: read %d records back from %s: %d canonical URLs, %d forwarded more than once",
		okText(k.repeated == 0 && k.unknown == 0 && k.badKeys == 0), k.records, sc.output, k.distinct, k.repeated)
	if k.unknown > 0 || k.badKeys > 0 {
		row("", "%d forwarded URLs are not among those produced, %d had no extractable URL", k.unknown, k.badKeys)
	}
	row("false positives", "%d = unique %s never forwarded, %.4f%% of unique keys (filter target %g%%)",
		k.missing, sc.keyNoun, 100*float64(k.missing)/float64(t.unique), target)
	row("repartition hop", "a second write and read of every link: %d records, %s in %s (the input: %s),",
		k.hopRecords, quantity.Bytes(uint64(k.hopBytes)), s.hopTopic, quantity.Bytes(uint64(t.bytes)))
	row("", "%d copies from retries; its throughput cost is measured in docs/benchmarks.md", max(k.hopRecords-t.events, 0))
}

// writePlan reports the filter's plan against what the checkpoints hold.
func writePlan(row func(k, format string, a ...any), s devSummary) {
	p := s.plan
	row("filter plan", "capacity %s = %d (generations per window) x %d unique keys + headroom: the demo's",
		quantity.Count(p.capacity), p.generations-1, p.unique)
	row("", "keys all arrive within one generation, which plans for %d keys per partition", p.perGen)
	switch z := s.sizes; {
	case z.err != nil || z.maxInserts == 0:
	case z.stacks == 0:
		row("", "fullest generation: %d keys, no overflow", z.maxInserts)
	default:
		row("", "fullest generation: %d keys; %d overflow sub-filters stacked (more keys than planned)", z.maxInserts, z.stacks)
	}
}

func writeHints(w io.Writer, s devSummary) {
	fmt.Fprintln(w, "\nNext:")
	fmt.Fprintf(w, "  %s inspect %s\n", s.prog, s.cpURL)
	pad := func(cmd string) string { return fmt.Sprintf("%-62s  ", cmd) }
	if s.sc.repartition {
		fmt.Fprintf(w, "  %s# a longer run; watch /metrics meanwhile\n", pad(s.prog+" dev --scenario crawler --events 2000000 --keep-running"))
		fmt.Fprintf(w, "  %s run --brokers kafka-1:9092 --input links --output frontier \\\n", s.prog)
		fmt.Fprintln(w, "      --key json:url --normalize url --repartition --capacity 1G --checkpoint-url s3://my-bucket/bloomgate   # a real cluster")
	} else {
		fmt.Fprintf(w, "  %s# a longer run; watch /metrics meanwhile\n", pad(s.prog+" dev --events 5000000 --rate 200000 --keep-running"))
		fmt.Fprintf(w, "  %s run --brokers kafka-1:9092 --input orders --output orders-unique \\\n", s.prog)
		fmt.Fprintln(w, "      --key json:order_id --capacity 50M --checkpoint-url s3://my-bucket/bloomgate   # a real cluster")
	}
	fmt.Fprintf(w, "  %s# every setting\n", pad(s.prog+" run --help"))
}

// commandName is the program as the user ran it, for the hints: `make run`
// runs ./bin/bloomgate, and a hint naming a bare "bloomgate" would not run
// from there. A binary the go command built into its temporary directory
// (go run, go test), gone once it exits, is named "bloomgate".
func commandName() string {
	arg0 := os.Args[0]
	if !strings.ContainsRune(arg0, filepath.Separator) {
		return arg0 // found on the PATH
	}
	if strings.Contains(arg0, string(filepath.Separator)+"go-build") || strings.HasSuffix(arg0, ".test") {
		return "bloomgate"
	}
	return arg0
}

type cpSizes struct {
	partitions  int
	bytes       int64 // referenced by the newest manifests
	storedBytes int64 // everything stored
	objects     int
	estKeys     uint64
	maxInserts  uint64 // of the fullest generation
	stacks      int    // overflow sub-filters over all generations
	err         error
}

func checkpointSizes(store *checkpoint.Store) cpSizes {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := checkpoint.Inspect(ctx, store)
	if err != nil {
		return cpSizes{err: err}
	}
	var s cpSizes
	for _, p := range rep.Partitions {
		s.partitions++
		s.bytes += p.Bytes
		s.storedBytes += p.StoredBytes
		s.objects += p.Objects
		s.estKeys += p.EstKeys
		for _, g := range p.Generations {
			s.maxInserts = max(s.maxInserts, g.Inserts)
			s.stacks += g.Stacks
		}
	}
	return s
}

func okText(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISMATCH"
}

func rateText(r int) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d/s", r)
}
