package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// summaryNumber returns the first integer after label in the summary.
func summaryNumber(t *testing.T, out, label string) int64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + `\s+(-?\d+)`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("summary has no %q line:\n%s", label, out)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var devTestArgs = []string{"dev", "--events", "20000", "--metrics-addr", "127.0.0.1:0"}

func TestDevDemoTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo twice (a few seconds)")
	}
	dir := t.TempDir()
	cpURL := "file://" + dir
	var runDirs []string
	for i := 0; i < 2; i++ {
		code, stdout, stderr := runInProcess(append(devTestArgs, "--checkpoint-url", cpURL)...)
		if code != exitOK {
			t.Fatalf("run %d: exit %d\nstdout:\n%s\nstderr:\n%s", i+1, code, stdout, stderr)
		}
		if !strings.Contains(stdout, "Summary (every produced event was consumed)") {
			t.Fatalf("run %d: no complete summary:\n%s", i+1, stdout)
		}
		if strings.Contains(stderr, "\r") {
			t.Errorf("run %d: progress rewrote lines on a non-terminal stderr", i+1)
		}
		if !strings.Contains(stderr, "produced 20000  consumed 20000") {
			t.Errorf("run %d: no final progress line:\n%s", i+1, stderr)
		}
		m := regexp.MustCompile(`produced\s+(\d+) events: (\d+) unique order_ids \+ (\d+) duplicates`).FindStringSubmatch(stdout)
		if m == nil {
			t.Fatalf("no produced line:\n%s", stdout)
		}
		produced, _ := strconv.ParseInt(m[1], 10, 64)
		unique, _ := strconv.ParseInt(m[2], 10, 64)
		dups, _ := strconv.ParseInt(m[3], 10, 64)
		consumed := summaryNumber(t, stdout, "consumed")
		forwarded := summaryNumber(t, stdout, "forwarded")
		duplicates := summaryNumber(t, stdout, "duplicates")
		dead := summaryNumber(t, stdout, "dead-lettered")
		fp := summaryNumber(t, stdout, "false positives")
		if produced != 20000 || unique+dups != produced || dups != 4000 {
			t.Errorf("ground truth %d = %d unique + %d duplicates, want 20000 = 16000 + 4000", produced, unique, dups)
		}
		if consumed != produced {
			t.Errorf("consumed %d, produced %d", consumed, produced)
		}
		if forwarded+duplicates+dead != consumed || dead != 0 {
			t.Errorf("forwarded %d + duplicates %d + dead-lettered %d != consumed %d", forwarded, duplicates, dead, consumed)
		}
		if fp != unique-forwarded || fp < 0 || float64(fp) > 0.01*float64(unique) {
			t.Errorf("false positives %d (unique %d, forwarded %d): want 0 <= fp = unique-forwarded <= 1%%", fp, unique, forwarded)
		}
		if !strings.Contains(stdout, "conservation         ok") {
			t.Errorf("conservation not ok:\n%s", stdout)
		}
		// The run's checkpoints are in their own directory and inspectable.
		cp := regexp.MustCompile(`(?m)^  bloomgate inspect (\S+)$`).FindStringSubmatch(stdout)
		if cp == nil || !strings.HasPrefix(cp[1], cpURL+"/run-") {
			t.Fatalf("no inspect command for a run directory below %s:\n%s", cpURL, stdout)
		}
		runDirs = append(runDirs, cp[1])
		if !strings.Contains(stdout, "8 partitions, ") {
			t.Errorf("checkpoint sizes do not cover 8 partitions:\n%s", stdout)
		}
		// The demo plans its filter for its own keys: no generation
		// overflows into stacked sub-filters.
		if !regexp.MustCompile(`fullest generation: \d+ keys, no overflow`).MatchString(stdout) {
			t.Errorf("the filter overflowed its plan, or the summary does not say:\n%s", stdout)
		}
		code, rep, stderr := runInProcess("inspect", cp[1])
		if code != exitOK || strings.Count(rep, "bloomgate-dev / orders / ") != 8 {
			t.Errorf("inspect %s: exit %d, %q\n%s", cp[1], code, stderr, rep)
		}
	}
	if runDirs[0] == runDirs[1] {
		t.Fatalf("both runs used %s", runDirs[0])
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 2 {
		t.Fatalf("checkpoint directory holds %v (%v), want two run directories", entries, err)
	}
}

func TestDevMetricsPortBusy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	code, stdout, stderr := runInProcess("dev", "--events", "2000",
		"--metrics-addr", busy, "--checkpoint-url", "file://"+filepath.Join(t.TempDir(), "cp"))
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "metrics address "+busy+" is in use") || !strings.Contains(stderr, "serving metrics on 127.0.0.1:") {
		t.Errorf("no note about the busy metrics port:\n%s", stderr)
	}
}

func TestDevUsage(t *testing.T) {
	code, stdout, _ := runInProcess("dev", "--help")
	if code != exitOK || !strings.Contains(stdout, "Usage: bloomgate dev") || !strings.Contains(stdout, "-keep-running") {
		t.Fatalf("--help: exit %d, %q", code, stdout)
	}
	for _, args := range [][]string{
		{"dev", "--duplicates", "1.5"},
		{"dev", "--events", "0"},
		{"dev", "--partitions", "0"},
		{"dev", "--scenario", "shop"},
		{"dev", "--scenario", "crawler", "--fetchers", "0"},
		{"dev", "--checkpoint-url", "ftp://x"},
		{"dev", "extra"},
	} {
		if code, _, stderr := runInProcess(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%q)", args, code, exitUsage, stderr)
		}
	}
}

func TestDevInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--events", "5000000", "--rate", "20000", "--metrics-addr", "",
			"--checkpoint-url", "file://" + t.TempDir()}, &out, &errb)
	}()
	time.Sleep(3 * time.Second)
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after interrupt\n%s\n%s", code, out.String(), errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no exit within 60s of the interrupt")
	}
	s := out.String()
	produced := regexp.MustCompile(`(?m)^  produced\s+(\d+) events: (\d+) unique`).FindStringSubmatch(s)
	if produced == nil {
		t.Fatalf("no produced line after interrupt:\n%s", s)
	}
	written, _ := strconv.ParseInt(produced[1], 10, 64)
	unique, _ := strconv.ParseInt(produced[2], 10, 64)
	consumed := summaryNumber(t, s, "consumed")
	if consumed == 0 {
		t.Errorf("nothing consumed in 3s:\n%s", s)
	}
	// The producer stops first, then the worker gets a few seconds to
	// consume what was written: at 20000 events/s it does, and the summary
	// says so and measures the false positives.
	if consumed == written {
		want := fmt.Sprintf("Summary (interrupted: the producer stopped after %d of 5000000 events, and the worker consumed every one of them)", written)
		if !strings.Contains(s, want) || strings.Contains(s, "not measured") {
			t.Errorf("all %d written events consumed; summary after interrupt:\n%s", written, s)
		}
		if fp := summaryNumber(t, s, "false positives"); fp < 0 || fp > unique/100 {
			t.Errorf("false positives %d of %d", fp, unique)
		}
	} else {
		t.Logf("the worker had not caught up within the grace period (a loaded machine?): %d of %d", consumed, written)
		if !strings.Contains(s, "the worker stopped before it had consumed them all") || !strings.Contains(s, "not measured") {
			t.Errorf("summary after interrupt:\n%s", s)
		}
	}
}

// TestDevCrawler runs the crawler scenario small: links keyed by source
// host go through the repartition hop, and the output read back holds each
// canonical URL once.
func TestDevCrawler(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	code, stdout, stderr := runInProcess("dev", "--scenario", "crawler", "--events", "6000", "--metrics-addr", "",
		"--checkpoint-url", "file://"+t.TempDir())
	if code != exitOK || !strings.Contains(stdout, "Summary (every produced event was consumed)") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`produced\s+(\d+) link events from (\d+) fetchers: (\d+) unique canonical URLs \+ (\d+) duplicates`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no produced line:\n%s", stdout)
	}
	var truth [4]int64
	for i := range truth {
		truth[i], _ = strconv.ParseInt(m[i+1], 10, 64)
	}
	produced, fetchers, unique, dups := truth[0], truth[1], truth[2], truth[3]
	if produced != 6000 || fetchers != 4 || unique != 4800 || dups != 1200 {
		t.Errorf("ground truth %d events from %d fetchers = %d unique + %d duplicates, want 6000 from 4 = 4800 + 1200", produced, fetchers, unique, dups)
	}
	// Keyed by source host, most copies of a URL land in another partition
	// than its first occurrence (7 in 8 with 8 partitions).
	cm := regexp.MustCompile(`keyed by source host: (\d+) of the duplicates landed in a partition their URL had not reached`).FindStringSubmatch(stdout)
	if cm == nil {
		t.Fatalf("no cross-partition line:\n%s", stdout)
	}
	if cross, _ := strconv.ParseInt(cm[1], 10, 64); cross < dups/2 || cross > dups {
		t.Errorf("%d of %d duplicates in a partition their URL had not reached; want most of them", cross, dups)
	}
	repartitioned := summaryNumber(t, stdout, "repartitioned")
	consumed := summaryNumber(t, stdout, "consumed")
	forwarded := summaryNumber(t, stdout, "forwarded")
	duplicates := summaryNumber(t, stdout, "duplicates")
	dead := summaryNumber(t, stdout, "dead-lettered")
	if repartitioned < produced || consumed != repartitioned {
		t.Errorf("repartitioned %d, consumed %d; want both >= %d produced and equal", repartitioned, consumed, produced)
	}
	if forwarded+duplicates+dead != consumed || dead != 0 {
		t.Errorf("forwarded %d + duplicates %d + dead-lettered %d != consumed %d", forwarded, duplicates, dead, consumed)
	}
	fm := regexp.MustCompile(`forwarded once\s+ok: read (\d+) records back from frontier: (\d+) canonical URLs, 0 forwarded more than once`).FindStringSubmatch(stdout)
	if fm == nil {
		t.Fatalf("output not read back as forwarded once each:\n%s", stdout)
	}
	records, _ := strconv.ParseInt(fm[1], 10, 64)
	distinct, _ := strconv.ParseInt(fm[2], 10, 64)
	if records != forwarded || distinct != forwarded {
		t.Errorf("read back %d records, %d canonical URLs; the worker forwarded %d", records, distinct, forwarded)
	}
	fp := summaryNumber(t, stdout, "false positives")
	if fp != unique-distinct || fp < 0 || float64(fp) > 0.01*float64(unique) {
		t.Errorf("false positives %d (unique %d, forwarded once %d): want 0 <= fp = unique-forwarded <= 1%%", fp, unique, distinct)
	}
	hop := regexp.MustCompile(`repartition hop\s+a second write and read of every link: (\d+) records, [0-9.]+ [KMG]?i?B in bloomgate-dev-repartition`).FindStringSubmatch(stdout)
	if hop == nil || hop[1] != strconv.FormatInt(repartitioned, 10) {
		t.Errorf("no hop cost matching %d repartitioned records:\n%s", repartitioned, stdout)
	}
	for _, want := range []string{"conservation         ok", "no overflow", "bloomgate dev --scenario crawler", "--repartition"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "repartitioned 6000  consumed 6000") {
		t.Errorf("no final progress line:\n%s", stderr)
	}
}

// TestDevExact: `dev --exact` runs the worker in exact mode with its
// stores below --exact-dir: no false positives, and the summary says how
// many positives of the filter the store refuted (forwarded instead of
// dropped). Whether the filter had a false positive to refute depends on
// the random keys: the count is only checked to be reported.
func TestDevExact(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo (a few seconds)")
	}
	dir := t.TempDir()
	code, stdout, stderr := runInProcess(append(devTestArgs, "--checkpoint-url", "file://"+dir+"/cp", "--exact", "--exact-dir", dir+"/exact")...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if fp := summaryNumber(t, stdout, "false positives"); fp != 0 {
		t.Errorf("exact mode forwarded %d fewer unique keys than written:\n%s", fp, stdout)
	}
	if !regexp.MustCompile(`\d+ positives of the filter refuted by the store and forwarded`).MatchString(stdout) {
		t.Errorf("no refuted count in the summary:\n%s", stdout)
	}
	if !strings.Contains(stderr, "exact mode   the filter's positives are confirmed in a store of key hashes in "+dir+"/exact/run-") {
		t.Errorf("the header does not name the run's exact directory:\n%s", stderr)
	}
	runs, err := os.ReadDir(filepath.Join(dir, "exact"))
	if err != nil || len(runs) != 1 || !strings.HasPrefix(runs[0].Name(), "run-") {
		t.Errorf("exact-dir holds %v (%v), want one run directory", runs, err)
	}
}
