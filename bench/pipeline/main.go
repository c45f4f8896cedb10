// Command pipeline measures bloomgate end to end against pass-through
// pipes (kafka-go's and franz-go's), side by side in one run.
//
// It builds bloomgate as the container image does (CGO_ENABLED=0,
// -trimpath, -ldflags '-s -w', -tags nodev: the executable a worker runs)
// and a full build for the tools, starts `bloomgate broker` as its own
// process (its records in files of a temporary directory; -broker-store
// memory keeps them in kfake's in-memory store instead), loads
// the input topic once with `bloomgate loadgen` (order events, ~200-byte JSON
// values, a known share of duplicates), then for every batch setting runs,
// one after the other on the same input, a `bloomgate run` process and a
// pass-through pipe process (this program with -mode pipe: the same
// consumer group, per-partition readers, batching, writer and single
// committer as the worker, without key extraction and filter). Each process
// gets its own consumer group and output topic.
//
// Measured per process, from outside:
//   - events/s: the output topic's high-water marks are sampled every 50ms;
//     the rate covers the steady state, from 5% to 95% of the final output,
//     converted to input events (bloomgate writes ~80% of its input);
//   - CPU seconds per million input events over the same span, from
//     /proc/<pid>/stat (utime+stime);
//   - peak RSS: VmHWM from /proc/<pid>/status at the end.
//
// With -compare pipes three processes are compared per setting: the
// franz-go (kgo) pipe (-mode kgo-pipe: poll, produce to the same partition
// with acks=all, mark, commit the marks every second), the kafka-go pipe
// and bloomgate; -compare kgo leaves the kafka-go pipe out.
//
// With -compare exact the two processes of each setting are `bloomgate
// run` filter only and `bloomgate run --exact` (the exact store in a fresh
// local directory), instead of the pipe and bloomgate; the table then also
// shows RssAnon and RssFile at the end (the exact store's mapped files
// count as RssFile) and the exact directory's size.
//
// With -compare fingerprint they are `bloomgate run` with the ring filter
// (the default) and `bloomgate run --filter fingerprint --generations 8`.
//
// Usage (from the bench directory):
//
//	go run ./pipeline -events 1000000 -partitions 8 -settings 2000:1ms,2000:5ms
//	go run ./pipeline -events 1000000 -partitions 8 -settings 2000:5ms -compare exact -reps 3 -run concurrent
//	go run ./pipeline -events 1000000 -partitions 8 -settings 2000:5ms -compare fingerprint -reps 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/segmentio/kafka-go"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bloomgate/bloomgate/bench/procstat"
)

func main() {
	mode := flag.String("mode", "bench", "bench (the measurement), pipe (the kafka-go pass-through pipe process) or kgo-pipe (the franz-go one)")
	var b benchConfig
	var p pipeConfig
	flag.IntVar(&b.events, "events", 1_000_000, "bench: input events")
	flag.IntVar(&b.partitions, "partitions", 8, "bench: partitions of every topic")
	flag.Float64Var(&b.duplicates, "duplicates", 0.2, "bench: fraction of duplicate events")
	flag.StringVar(&b.compression, "compression", "none", "bench: codec of the input's batches (none, gzip, snappy, lz4, zstd; written by kafka-go, as loadgen --compression)")
	flag.StringVar(&b.outCompression, "output-compression", "input", "bench: codec of every system's output: bloomgate --compression; the pipes write with it too (input: the input's codec)")
	flag.StringVar(&b.settings, "settings", "1000:1ms,2000:1ms,2000:5ms,3000:5ms", "bench: comma-separated batch-size:batch-timeout settings, each run for both")
	flag.IntVar(&b.reps, "reps", 1, "bench: repetitions of every setting (order of the two alternates)")
	flag.StringVar(&b.repo, "repo", "..", "bench: the bloomgate repository (to build cmd/bloomgate)")
	flag.StringVar(&b.bloomgate, "bloomgate", "", "bench: use this bloomgate binary instead of building one (built as the container image is: CGO_ENABLED=0, -trimpath, -ldflags '-s -w', -tags nodev)")
	flag.StringVar(&b.tools, "tools", "", "bench: bloomgate binary for the broker and the load generator (default: a full build of -repo; the worker's build may lack the broker)")
	flag.StringVar(&b.extraArgs, "bloomgate-args", "", "bench: extra flags for bloomgate run, space-separated")
	flag.StringVar(&b.mode, "run", "sequential", "bench: sequential (one process at a time) or concurrent (pipe and bloomgate at the same time, on the same input)")
	flag.StringVar(&b.perf, "perf", "", "bench: record a CPU profile of each bloomgate pass with perf into this directory")
	flag.StringVar(&b.compare, "compare", "pipe", "bench: pipe (the kafka-go pipe against bloomgate), kgo (the franz-go pipe against bloomgate), pipes (both pipes and bloomgate), exact (bloomgate filter only against bloomgate --exact) or fingerprint (the ring filter against --filter fingerprint)")
	flag.StringVar(&b.before, "before", "", "bench: also run this bloomgate binary (an earlier build) as system \"before\", with the same flags as bloomgate")
	flag.IntVar(&b.capacity, "capacity", 0, "bench: bloomgate --capacity (default: -events)")
	flag.StringVar(&b.brokerStore, "broker-store", "dir", "bench: where the broker keeps records: dir (files in a temporary directory, removed at the end) or memory (kfake's in-memory files, whose CPU per event varied 1.2-7 s per 1 M between passes)")
	flag.StringVar(&b.pprof, "pprof", "", "bench: build bloomgate with -tags pprof and save a CPU profile of the steady state and a heap profile at the end of every bloomgate pass into this directory")
	flag.StringVar(&p.brokers, "brokers", "", "pipe: bootstrap broker")
	flag.StringVar(&p.group, "group", "", "pipe: consumer group")
	flag.StringVar(&p.input, "input", "", "pipe: input topic")
	flag.StringVar(&p.output, "output", "", "pipe: output topic")
	flag.StringVar(&p.codec, "codec", "none", "pipe: output compression (none, gzip, snappy, lz4, zstd)")
	flag.IntVar(&p.batchSize, "batch-size", 2000, "pipe: records per read/write batch")
	flag.DurationVar(&p.batchTimeout, "batch-timeout", time.Millisecond, "pipe: max wait to fill a batch")
	flag.DurationVar(&p.linger, "linger", 0, "kgo-pipe: producer linger")
	flag.DurationVar(&b.kgoLinger, "kgo-linger", 0, "bench: also run the franz-go pipe with this producer linger, as system \"kgo-linger\"")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch *mode {
	case "pipe":
		err = runPipe(ctx, p)
	case "kgo-pipe":
		err = runKgoPipe(ctx, p)
	case "bench":
		err = runBench(ctx, b, os.Stdout)
	default:
		err = fmt.Errorf("-mode %q: bench or pipe", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

type benchConfig struct {
	events     int
	partitions int
	duplicates float64
	settings   string
	reps       int
	repo       string
	bloomgate  string
	tools      string // bloomgate binary with the broker (broker, loadgen)
	extraArgs  string
	perf       string // directory for perf profiles of the bloomgate passes
	mode       string // sequential or concurrent
	compare    string // pipe, kgo, pipes, exact or fingerprint
	capacity   int
	pprof      string // directory for pprof profiles of the bloomgate passes
	before     string // an earlier bloomgate binary, run as system "before"
	kgoLinger  time.Duration
	// brokerStore is dir or memory: with dir the broker writes its
	// records to files in a temporary directory.
	brokerStore string
	// compression is the input's codec (loadgen --compression);
	// outCompression every system's output codec (input: the same).
	compression, outCompression string
}

// systems are the processes compared per setting: the baselines first, the
// one the ratios are taken against first of all.
func (c benchConfig) systems() ([]string, error) {
	s, err := c.compared()
	if err != nil {
		return nil, err
	}
	if c.kgoLinger > 0 && slices.Contains(s, "kgo") {
		s = slices.Insert(s, slices.Index(s, "kgo")+1, "kgo-linger")
	}
	if c.before != "" {
		s = slices.Insert(s, slices.Index(s, "bloomgate"), "before")
	}
	return s, nil
}

func (c benchConfig) compared() ([]string, error) {
	switch c.compare {
	case "pipe":
		return []string{"pipe", "bloomgate"}, nil
	case "kgo":
		return []string{"kgo", "bloomgate"}, nil
	case "pipes":
		return []string{"kgo", "pipe", "bloomgate"}, nil
	case "exact":
		return []string{"bloomgate", "exact"}, nil
	case "fingerprint":
		return []string{"bloomgate", "fingerprint"}, nil
	}
	return nil, fmt.Errorf("-compare %q: pipe, kgo, pipes, exact or fingerprint", c.compare)
}

type setting struct {
	batchSize    int
	batchTimeout time.Duration
}

func parseSettings(s string) ([]setting, error) {
	var out []setting
	for _, part := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("setting %q: want batch-size:batch-timeout, e.g. 2000:1ms", part)
		}
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("setting %q: batch size %q", part, a)
		}
		d, err := time.ParseDuration(b)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("setting %q: batch timeout %q", part, b)
		}
		out = append(out, setting{n, d})
	}
	return out, nil
}

// result is one measured process.
type result struct {
	system     string
	set        setting
	rate       float64 // input events/s
	cpuPerM    float64 // CPU seconds per million input events
	hwmMiB     float64
	output     int64
	span       time.Duration
	cpuTotalS  float64 // whole process life, startup included
	brokerPerM float64 // broker CPU seconds per million input events, same span
	warnings   int     // WARN/ERROR log lines of the process
	// At the end: anonymous and file-backed resident memory (MiB), and
	// the exact store directory's size (bytes; exact only).
	rssAnon, rssFile float64
	exactBytes       int64
	// outBytes is the size of the output topic on the broker.
	outBytes int64
	// total is from the process's start to every input offset committed.
	total time.Duration
}

func runBench(ctx context.Context, cfg benchConfig, out io.Writer) error {
	sets, err := parseSettings(cfg.settings)
	if err != nil {
		return err
	}
	systems, err := cfg.systems()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bloomgate-pipeline")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	bin := cfg.bloomgate
	if bin == "" {
		bin = filepath.Join(tmp, "bloomgate")
		logf("building bloomgate from %s as the container image is", cfg.repo)
		tags := "nodev"
		if cfg.pprof != "" {
			tags += ",pprof"
		}
		// deployments/Dockerfile's build: what a worker runs.
		if err := goBuild(ctx, cfg.repo, bin, []string{"CGO_ENABLED=0"}, "-trimpath", "-ldflags", "-s -w", "-tags", tags); err != nil {
			return fmt.Errorf("building bloomgate: %w", err)
		}
	}
	tools := cfg.tools
	if tools == "" {
		tools = filepath.Join(tmp, "bloomgate-tools")
		logf("building bloomgate's broker and load generator from %s", cfg.repo)
		if err := goBuild(ctx, cfg.repo, tools, nil); err != nil {
			return fmt.Errorf("building bloomgate: %w", err)
		}
	}
	// Every measured executable runs from a fresh copy, written here the
	// same way: how a file came into the page cache (written by the
	// linker, copied, read back after eviction) decides how much of it a
	// fault maps (fault-around, large folios). The same bytes measured
	// 20.4 and 25.9 MiB of `bloomgate version` peak RSS as two files, enough
	// to decide a comparison of peaks ("Compressed input" in
	// docs/benchmarks-journal.md).
	if bin, err = freshCopy(bin, filepath.Join(tmp, "bloomgate-run")); err != nil {
		return err
	}
	if cfg.before != "" {
		if cfg.before, err = freshCopy(cfg.before, filepath.Join(tmp, "bloomgate-before")); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if self, err = freshCopy(self, filepath.Join(tmp, "pipeline-self")); err != nil { // the pipes
		return err
	}

	loadStart := loadavg()
	passes := len(sets) * cfg.reps * len(systems)
	capacity := cfg.capacity
	if capacity <= 0 {
		capacity = cfg.events
	}
	args := []string{"broker", "--listen", "127.0.0.1:0", "--topic", fmt.Sprintf("in:%d", cfg.partitions)}
	switch cfg.brokerStore {
	case "dir":
		// kfake's in-memory store copies every produced batch into a
		// growing Go slice: its CPU per event swung 1.2-7 s per 1 M
		// between passes with the runtime's page faults and collections,
		// and decided the comparisons; files (the page cache) cost a
		// steady ~1.3 s (docs/benchmarks-journal.md, "A steady broker").
		dir, err := os.MkdirTemp("", "bloomgate-bench-broker-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		args = append(args, "--data-dir", dir)
	case "memory":
	default:
		return fmt.Errorf("-broker-store %q: dir or memory", cfg.brokerStore)
	}
	for i := 0; i < passes; i++ {
		args = append(args, "--topic", fmt.Sprintf("out-%d:%d", i, cfg.partitions))
	}
	brk, err := startProc(ctx, tools, args...)
	if err != nil {
		return err
	}
	defer brk.stop(20 * time.Second)
	addr, err := brk.waitFor(regexp.MustCompile(`broker listening on (\S+)`), 30*time.Second)
	if err != nil {
		return err
	}
	logf("broker %s (pid %d)", addr, brk.cmd.Process.Pid)

	logf("loading %d events (%.0f%% duplicates) into topic in", cfg.events, 100*cfg.duplicates)
	lg := exec.CommandContext(ctx, tools, "loadgen", "--brokers", addr, "--topic", "in",
		"--count", strconv.Itoa(cfg.events), "--duplicates", strconv.FormatFloat(cfg.duplicates, 'f', -1, 64), "--quiet")
	if cfg.compression != "none" { // builds before loadgen --compression load uncompressed input
		lg.Args = append(lg.Args, "--compression", cfg.compression)
	}
	lg.Stderr = os.Stderr
	lgOut, err := lg.Output()
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	logf("loadgen: %s", strings.TrimSpace(string(lgOut)))
	valueBytes := 0.0
	if m := regexp.MustCompile(`bytes=(\d+)`).FindStringSubmatch(string(lgOut)); m != nil {
		b, _ := strconv.ParseFloat(m[1], 64)
		valueBytes = b / float64(cfg.events)
	}

	probe := newProbe(addr)
	inBytes, err := topicBytes(ctx, addr, "in", cfg.partitions)
	if err != nil {
		return fmt.Errorf("sizing the input: %w", err)
	}
	pipeCodec := cfg.outCompression
	if pipeCodec == "input" {
		pipeCodec = cfg.compression
	}
	var results []result
	failed := 0
	pass := 0
	for _, s := range sets {
		for rep := 0; rep < cfg.reps; rep++ {
			// The order rotates between repetitions, so that no system
			// always runs first (sequential) or starts first (concurrent).
			order := make([]string, len(systems))
			for i := range systems {
				order[i] = systems[(i+rep)%len(systems)]
			}
			var jobs []job
			for _, system := range order {
				group := fmt.Sprintf("g-%d", pass)
				topic := fmt.Sprintf("out-%d", pass)
				pass++
				j := job{system: system, group: group, topic: topic}
				if system == "pipe" || strings.HasPrefix(system, "kgo") {
					mode := "pipe"
					if system != "pipe" {
						mode = "kgo-pipe"
					}
					j.exe = self
					j.args = []string{"-mode", mode, "-brokers", addr, "-group", group, "-input", "in", "-output", topic,
						"-batch-size", strconv.Itoa(s.batchSize), "-batch-timeout", s.batchTimeout.String(), "-codec", pipeCodec}
					if system == "kgo-linger" {
						j.args = append(j.args, "-linger", cfg.kgoLinger.String())
					}
				} else {
					j.exe = bin
					if system == "before" {
						j.exe = cfg.before
					}
					j.args = []string{"run", "--brokers", addr, "--group", group, "--input", "in", "--output", topic,
						"--key", "json:order_id", "--capacity", strconv.Itoa(capacity),
						"--checkpoint-url", "file://" + filepath.Join(tmp, "cp-"+strconv.Itoa(pass)),
						"--metrics-addr", "", "--log-level", "warn",
						"--batch-size", strconv.Itoa(s.batchSize), "--batch-timeout", s.batchTimeout.String()}
					if cfg.outCompression != "input" { // input is the default (and builds before --compression know no flag)
						j.args = append(j.args, "--compression", cfg.outCompression)
					}
					if cfg.extraArgs != "" {
						j.args = append(j.args, strings.Fields(cfg.extraArgs)...)
					}
					if system == "exact" {
						j.exactDir = filepath.Join(tmp, "exact-"+strconv.Itoa(pass))
						j.args = append(j.args, "--exact", "--exact-dir", j.exactDir)
					}
					if system == "fingerprint" {
						j.args = append(j.args, "--filter", "fingerprint", "--generations", "8")
					}
					if slices.Contains(j.args, "--repartition") {
						// The dedup stage reads <group>-repartition, which
						// holds every input event once (no crash here).
						j.commitTopic = group + "-repartition"
					}
					if cfg.perf != "" {
						j.perfOut = filepath.Join(cfg.perf, fmt.Sprintf("%s-%d-%s-%d-%s.perf", system, s.batchSize, s.batchTimeout, rep, cfg.mode))
					}
					if cfg.pprof != "" {
						j.pprofOut = filepath.Join(cfg.pprof, fmt.Sprintf("%s-%d-%s-%d-%s", system, s.batchSize, s.batchTimeout, rep, cfg.mode))
					}
				}
				jobs = append(jobs, j)
			}
			var batches [][]job
			if cfg.mode == "concurrent" {
				batches = [][]job{jobs}
			} else {
				for _, j := range jobs {
					batches = append(batches, []job{j})
				}
			}
			for _, b := range batches {
				rs, err := measure(ctx, probe, brk.cmd.Process.Pid, b, int64(cfg.events), cfg.partitions)
				if err != nil && ctx.Err() == nil && len(b) == 1 {
					// One pass of one program failed (kafka-go's pipe has
					// hung in a rebalance): leave it out of the medians.
					logf("%s batch %d/%s: pass failed, left out: %v", b[0].system, s.batchSize, s.batchTimeout, err)
					failed++
					continue
				}
				if err != nil {
					return fmt.Errorf("batch %d:%s: %w", s.batchSize, s.batchTimeout, err)
				}
				// The broker keeps every topic in memory: a pass's output
				// (~2 GB at 5 M events) is dropped once it is counted, or 3
				// repetitions at 5 M events outgrow 24 GiB.
				for _, j := range b {
					if n, err := topicBytes(ctx, addr, j.topic, cfg.partitions); err != nil {
						logf("sizing %s: %v", j.topic, err)
					} else {
						for i := range rs {
							if rs[i].system == j.system {
								rs[i].outBytes = n
							}
						}
					}
					if _, err := probe.c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Addr: probe.c.Addr, Topics: []string{j.topic}}); err != nil {
						logf("deleting %s after its pass: %v", j.topic, err)
					}
				}
				for _, r := range rs {
					r.set = s
					logf("%-9s batch %d/%s: %.0f events/s, %.2f CPU s per 1M events (broker %.2f), peak RSS %.1f MiB, at the end RssAnon %.0f MiB RssFile %.0f MiB, exact store %.1f MiB (output %d records in %.1f MiB, %.2fx the input's %.1f MiB; span %s; start to all committed %s, %d warnings)",
						r.system, s.batchSize, s.batchTimeout, r.rate, r.cpuPerM, r.brokerPerM, r.hwmMiB, r.rssAnon, r.rssFile, float64(r.exactBytes)/(1<<20),
						r.output, float64(r.outBytes)/(1<<20), float64(r.outBytes)/float64(inBytes), float64(inBytes)/(1<<20), r.span.Round(time.Millisecond), r.total.Round(time.Millisecond), r.warnings)
					results = append(results, r)
				}
			}
		}
	}
	brokerCPU := procCPU(brk.cmd.Process.Pid)
	writeTable(out, cfg, systems, valueBytes, results, brokerCPU)
	fmt.Fprintf(out, "\nbytes written (median over passes; input %.1f MiB, %s; output codec %s):", float64(inBytes)/(1<<20), cfg.compression, cfg.outCompression)
	for _, sys := range systems {
		var rs []result
		for _, r := range results {
			if r.system == sys {
				rs = append(rs, r)
			}
		}
		b := median(rs, func(r result) float64 { return float64(r.outBytes) })
		tot := median(rs, func(r result) float64 { return r.total.Seconds() })
		fmt.Fprintf(out, " %s %.1f MiB (%.2fx), start to all committed %.2f s;", sys, b/(1<<20), b/float64(inBytes), tot)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "load average at start: %s; at end: %s (other work on this machine shares the CPUs)\n", loadStart, loadavg())
	if failed > 0 {
		fmt.Fprintf(out, "%d passes failed and are left out of the medians (see the log)\n", failed)
	}
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
}

type sample struct {
	at        time.Time
	output    int64
	cpu       float64
	brokerCPU float64
}

// job is one process to measure.
type job struct {
	commitTopic  string // where the group's commits show it is done; default "in"
	system       string
	exe          string
	args         []string
	group, topic string
	perfOut      string
	pprofOut     string // prefix of the pprof profiles (-pprof)
	exactDir     string // exact: the store directory
}

type running struct {
	job
	p        *proc
	started  time.Time
	samples  []sample
	finished bool
	// total is from the process's start to every input offset committed:
	// what a user waits for.
	total            time.Duration
	hwm, cpu         float64
	rssAnon, rssFile float64
	exactBytes       int64
}

// measure runs the jobs at the same time (one job: alone) until each job's
// group has committed every input offset, sampling output and CPU.
func measure(ctx context.Context, pr *probe, brokerPid int, jobs []job, events int64, partitions int) ([]result, error) {
	var rs []*running
	defer func() {
		for _, r := range rs {
			_ = r.p.stop(30 * time.Second)
		}
	}()
	var profiles sync.WaitGroup
	defer profiles.Wait()
	for _, j := range jobs {
		var env []string
		if j.pprofOut != "" {
			env = []string{"BLOOMGATE_PPROF_ADDR=127.0.0.1:0"}
		}
		p, err := startProcEnv(ctx, env, j.exe, j.args...)
		if err != nil {
			return nil, err
		}
		rs = append(rs, &running{job: j, p: p, started: time.Now()})
		if j.pprofOut != "" {
			addr, err := p.waitFor(regexp.MustCompile(`pprof listening on (\S+)`), 10*time.Second)
			if err != nil {
				return nil, fmt.Errorf("%s: %w (build with -tags pprof)", j.system, err)
			}
			profiles.Add(1)
			go func() {
				defer profiles.Done()
				collectProfiles(ctx, "http://"+addr, j.pprofOut)
			}()
		}
		if j.perfOut != "" {
			time.Sleep(300 * time.Millisecond) // let the runtime start its threads: perf -p follows the threads present
			rec, err := startProc(ctx, "perf", "record", "-e", "cpu-clock", "-F", "499", "-g", "-o", j.perfOut, "-p", strconv.Itoa(p.cmd.Process.Pid))
			if err != nil {
				return nil, err
			}
			defer func() {
				_ = rec.cmd.Process.Signal(os.Interrupt)
				<-rec.done
			}()
		}
	}
	// A pass that hangs (kafka-go's pipe in a rebalance) gives up at 3 min
	// plus 50 µs per event: 5.5 min for 3 M events.
	limit := 3*time.Minute + time.Duration(events)*50*time.Microsecond
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastCommitCheck := time.Time{}
	for left := len(rs); left > 0; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not done within %v", limit)
		}
		checkCommit := time.Since(lastCommitCheck) >= 200*time.Millisecond
		if checkCommit {
			lastCommitCheck = time.Now()
		}
		for _, r := range rs {
			if r.finished {
				continue
			}
			select {
			case <-r.p.done:
				return nil, fmt.Errorf("%s exited early: %v\n%s", r.system, r.p.err, tail(r.p.output.String(), 3000))
			default:
			}
			n, err := pr.highWater(ctx, r.topic, partitions)
			if err != nil {
				continue
			}
			pid := r.p.cmd.Process.Pid
			r.samples = append(r.samples, sample{time.Now(), n, procCPU(pid), procCPU(brokerPid)})
			if checkCommit {
				topic := r.commitTopic
				if topic == "" {
					topic = "in"
				}
				if c, err := pr.committed(ctx, r.group, topic, partitions); err == nil && c >= events {
					r.finished, r.total = true, time.Since(r.started)
					r.hwm, r.cpu = procHWM(pid), procCPU(pid)
					r.rssAnon, r.rssFile = procstat.StatusMiB(pid, "RssAnon"), procstat.StatusMiB(pid, "RssFile")
					if r.exactDir != "" {
						r.exactBytes = procstat.DirBytes(r.exactDir)
					}
					left--
				}
			}
		}
	}
	var out []result
	for _, r := range rs {
		if err := r.p.stop(60 * time.Second); err != nil {
			return nil, fmt.Errorf("stopping %s: %w\n%s", r.system, err, tail(r.p.output.String(), 3000))
		}
		res, err := summarize(r, events)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.system, err)
		}
		out = append(out, res)
	}
	return out, nil
}

func summarize(r *running, events int64) (result, error) {
	samples := r.samples
	logText := r.p.output.String()
	warnings := strings.Count(logText, "level=WARN") + strings.Count(logText, "level=ERROR")
	final := samples[len(samples)-1].output
	// The steady-state window: from the first sample at >= 5% of the final
	// output to the first at >= 95%, so that start-up (group join, restore,
	// partitions starting one by one) and the tail do not count.
	first, done := -1, -1
	for i, s := range samples {
		if first < 0 && s.output > 0 && s.output*20 >= final {
			first = i
		}
		if done < 0 && s.output*20 >= final*19 {
			done = i
		}
	}
	if final == 0 || first < 0 || done <= first {
		return result{}, fmt.Errorf("too few samples with output (%d samples, final output %d)", len(samples), final)
	}
	span := samples[done].at.Sub(samples[first].at)
	outInSpan := float64(samples[done].output - samples[first].output)
	inInSpan := outInSpan * float64(events) / float64(final)
	return result{
		system:     r.system,
		rate:       inInSpan / span.Seconds(),
		cpuPerM:    (samples[done].cpu - samples[first].cpu) / inInSpan * 1e6,
		hwmMiB:     r.hwm,
		output:     final,
		span:       span,
		cpuTotalS:  r.cpu,
		warnings:   warnings,
		brokerPerM: (samples[done].brokerCPU - samples[first].brokerCPU) / inInSpan * 1e6,
		rssAnon:    r.rssAnon,
		rssFile:    r.rssFile,
		exactBytes: r.exactBytes,
		total:      r.total,
	}, nil
}

var clkTck = 100.0 // USER_HZ on Linux

// procCPU is utime+stime of pid in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may contain spaces) start at ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64) // field 14
	st, _ := strconv.ParseFloat(f[12], 64) // field 15
	return (ut + st) / clkTck
}

// procHWM is the peak resident set size of pid in MiB.
func procHWM(pid int) float64 { return procstat.StatusMiB(pid, "VmHWM") }

func writeTable(w io.Writer, cfg benchConfig, systems []string, valueBytes float64, rs []result, brokerCPU float64) {
	fmt.Fprintf(w, "\n%d events, %d partitions, %.0f%% duplicates, %.0f-byte JSON values on average, input compression %s, key json:order_id; %d CPUs (GOMAXPROCS %d); %s runs, median of %d per cell\n\n",
		cfg.events, cfg.partitions, 100*cfg.duplicates, valueBytes, cfg.compression, runtime.NumCPU(), runtime.GOMAXPROCS(0), cfg.mode, cfg.reps)
	var order []setting
	by := map[setting]map[string][]result{}
	for _, r := range rs {
		if by[r.set] == nil {
			by[r.set] = map[string][]result{}
			order = append(order, r.set)
		}
		by[r.set][r.system] = append(by[r.set][r.system], r)
	}
	if len(systems) > 2 {
		writeLongTable(w, systems, order, by)
		fmt.Fprintf(w, "\nbroker process CPU over the whole run (loading included): %.1f s; records kept in: %s\n", brokerCPU, cfg.brokerStore)
		return
	}
	a, b := systems[0], systems[1]
	fmt.Fprintf(w, "| batch size / timeout | %s events/s | %s events/s | ratio | %s CPU s / 1M | %s CPU s / 1M | broker CPU s / 1M (%s / %s) | %s peak RSS | %s peak RSS |\n", a, b, a, b, a, b, a, b)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range order {
		p, q := by[s][a], by[s][b]
		pr, qr := median(p, func(r result) float64 { return r.rate }), median(q, func(r result) float64 { return r.rate })
		fmt.Fprintf(w, "| %d / %s | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f / %.2f | %.1f MiB | %.1f MiB |\n",
			s.batchSize, s.batchTimeout, pr, qr, qr/pr,
			median(p, func(r result) float64 { return r.cpuPerM }), median(q, func(r result) float64 { return r.cpuPerM }),
			median(p, func(r result) float64 { return r.brokerPerM }), median(q, func(r result) float64 { return r.brokerPerM }),
			maxOf(p, func(r result) float64 { return r.hwmMiB }), maxOf(q, func(r result) float64 { return r.hwmMiB }))
	}
	if cfg.compare == "exact" {
		fmt.Fprintf(w, "\nMemory at the end (median): RssAnon and RssFile (the exact store's mapped run files are file-backed), and the exact store on disk\n\n")
		fmt.Fprintf(w, "| batch size / timeout | %s RssAnon | %s RssFile | %s RssAnon | %s RssFile | RssAnon ratio | VmHWM ratio | exact store on disk |\n", a, a, b, b)
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, s := range order {
			p, q := by[s][a], by[s][b]
			anonA, anonB := median(p, func(r result) float64 { return r.rssAnon }), median(q, func(r result) float64 { return r.rssAnon })
			hwmA, hwmB := median(p, func(r result) float64 { return r.hwmMiB }), median(q, func(r result) float64 { return r.hwmMiB })
			fmt.Fprintf(w, "| %d / %s | %.0f MiB | %.0f MiB | %.0f MiB | %.0f MiB | %.2f | %.2f | %.1f MiB |\n", s.batchSize, s.batchTimeout,
				anonA, median(p, func(r result) float64 { return r.rssFile }), anonB, median(q, func(r result) float64 { return r.rssFile }),
				anonB/anonA, hwmB/hwmA, median(q, func(r result) float64 { return float64(r.exactBytes) })/(1<<20))
		}
	}
	fmt.Fprintf(w, "\nbroker process CPU over the whole run (loading included): %.1f s; records kept in: %s\n", brokerCPU, cfg.brokerStore)
}

// writeLongTable has a row per setting and system, each against the first
// system (the ratios of the first system's row are 1).
func writeLongTable(w io.Writer, systems []string, order []setting, by map[setting]map[string][]result) {
	base := systems[0]
	fmt.Fprintf(w, "| batch size / timeout | program | events/s | × %s | CPU s / 1M | × %s | broker CPU s / 1M | peak RSS |\n", base, base)
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	rate := func(r result) float64 { return r.rate }
	cpu := func(r result) float64 { return r.cpuPerM }
	for _, s := range order {
		b := by[s][base]
		for _, sys := range systems {
			q := by[s][sys]
			fmt.Fprintf(w, "| %d / %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.1f MiB |\n", s.batchSize, s.batchTimeout, sys,
				median(q, rate), median(q, rate)/median(b, rate), median(q, cpu), median(q, cpu)/median(b, cpu),
				median(q, func(r result) float64 { return r.brokerPerM }), maxOf(q, func(r result) float64 { return r.hwmMiB }))
		}
	}
}

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func maxOf(rs []result, f func(result) float64) float64 {
	m := 0.0
	for _, r := range rs {
		m = max(m, f(r))
	}
	return m
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// proc is a child process with captured output.
type proc struct {
	cmd    *exec.Cmd
	output *syncBuffer
	done   chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil // enough to diagnose
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startProc(ctx context.Context, exe string, args ...string) (*proc, error) {
	return startProcEnv(ctx, nil, exe, args...)
}

// startProcEnv starts exe with env added to this process's environment.
func startProcEnv(ctx context.Context, env []string, exe string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(exe, args...), output: &syncBuffer{}, done: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", exe, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) waitFor(re *regexp.Regexp, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.output.String()); m != nil {
			return m[1], nil
		}
		select {
		case <-p.done:
			return "", fmt.Errorf("exited: %v\n%s", p.err, p.output.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("no %q within %s", re, limit)
}

// stop sends SIGTERM and waits; after limit it kills.
func (p *proc) stop(limit time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("killed: no exit after SIGTERM")
	}
}

// collectProfiles saves, from a process built with -tags pprof, a CPU
// profile of profileLength taken after profileDelay (the steady state of
// a run of a few seconds), then a heap profile (after a GC), as
// prefix.cpu.pprof and prefix.heap.pprof.
func collectProfiles(ctx context.Context, base, prefix string) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(profileDelay):
	}
	get := func(path, file string) {
		resp, err := http.Get(base + path)
		if err != nil {
			logf("pprof %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			logf("pprof: %v", err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			logf("pprof %s: %v", path, err)
		}
	}
	get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(profileLength/time.Second)), prefix+".cpu.pprof")
	get("/debug/pprof/heap?gc=1", prefix+".heap.pprof")
}

const (
	profileDelay  = 2 * time.Second
	profileLength = 4 * time.Second
)

// goBuild builds repo's cmd/bloomgate into bin with the flags and
// environment given.
func goBuild(ctx context.Context, repo, bin string, env []string, flags ...string) error {
	args := append([]string{"build", "-C", repo, "-o", bin}, flags...)
	build := exec.CommandContext(ctx, "go", append(args, "./cmd/bloomgate")...)
	build.Env = append(os.Environ(), env...)
	build.Stderr = os.Stderr
	return build.Run()
}

// freshCopy copies the executable src to dst with read and write (io.Copy
// would use copy_file_range, which can share the source's blocks) and
// returns dst.
func freshCopy(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 1<<20)
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			if _, err := out.Write(buf[:n]); err != nil {
				out.Close()
				return "", err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Close()
			return "", rerr
		}
	}
	return dst, out.Close()
}

// topicBytes is the size of topic's partitions on the broker
// (DescribeLogDirs).
func topicBytes(ctx context.Context, addr, topic string, partitions int) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeLogDirsRequest()
	t := kmsg.NewDescribeLogDirsRequestTopic()
	t.Topic = topic
	for p := range int32(partitions) {
		t.Partitions = append(t.Partitions, p)
	}
	req.Topics = []kmsg.DescribeLogDirsRequestTopic{t}
	var n int64
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return 0, sh.Err
		}
		for _, d := range sh.Resp.(*kmsg.DescribeLogDirsResponse).Dirs {
			for _, dt := range d.Topics {
				if dt.Topic != topic {
					continue
				}
				for _, dp := range dt.Partitions {
					n += dp.Size
				}
			}
		}
	}
	return n, nil
}
