// Package statuspage serves a human-readable status page of a worker: one
// self-contained HTML document (inline CSS, no scripts, no external assets)
// that reloads itself every few seconds, and the same data as JSON.
//
// The page leads with what an operator asks first: is the worker ready, and
// if not, why (failed, outside a group generation and for how long, which
// partitions are still restoring, scanning, replaying or seeding). Below
// that one table row per partition; a partition that is not yet running
// gets a second row with the progress of its current phase (share of the
// range, offsets done and left, keys remembered, rate, time left), a
// failing checkpoint a second row with the error, and generations a
// restore lost a second row saying what became of each (rebuilt from the
// input, or which span of event time is forgotten). A stalled partition
// (input waits and its position does not move, or it waits before a record
// its output refuses) is named in a notice under the summary, with its
// offset, for how long and its last error, and gets a second row too: it
// does not make the worker unready (see worker.StallAfter). Numbers are
// rounded for reading (see format.go); /status.json has them exact.
//
// Cost: each request takes one worker.Status snapshot (a copy under the
// worker's lock) and renders it; nothing runs between requests.
package statuspage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// RefreshSeconds is how often the page reloads itself.
const RefreshSeconds = 5

// view is what render writes.
type view struct {
	worker.Status
	Now     time.Time
	Refresh int
	// NotReady says why the worker is not ready, "" when it is; Short is
	// the same in a few words.
	NotReady, Short string
	TotalRate       float64
	// TotalLag waits to be forwarded; TotalFill is what seedings and
	// replays still read into the filters (worker.PartitionStatus.FillLag).
	TotalLag   int64
	TotalFill  int64
	TotalBytes uint64
	TotalKeys  uint64
	// OldestCheckpoint is the least recent of the partitions' last
	// checkpoints (zero if none has one yet).
	OldestCheckpoint time.Time
	// Topic is the input topic when all rows share it; rows then show
	// only their partition number.
	Topic string
	Rows  []row
	// Stalled lists the stalled partitions, one line each.
	Stalled []string
}

// row is one partition.
type row struct {
	worker.PartitionStatus
	// ForwardLag is the lag column: what waits to be forwarded (FillLag,
	// shown below it, is seeded or replayed into the filter only).
	ForwardLag int64
	Running    bool
	Progress   *progress
	// LostRows say what became of the generations a restore lost.
	LostRows []lostRow
}

// lostRow is one lost generation as the page says it; Bad when keys are
// forgotten.
type lostRow struct {
	Text string
	Bad  bool
}

// lostText says what became of a lost generation, in event time (UTC).
func lostText(lg worker.LostGeneration) lostRow {
	what := fmt.Sprintf("generation %d (event time %s – %s) of checkpoint %d", lg.ID, when(lg.Start), when(lg.End), lg.Checkpoint)
	switch lg.Outcome {
	case worker.LostRebuilt:
		return lostRow{Text: what + " did not load: rebuilt from the input, nothing forgotten"}
	case worker.LostUnverified:
		return lostRow{Text: fmt.Sprintf("the exact store of checkpoint %d did not load: positives matching generation %d are unverified (the filter's answer stands) until %s",
			lg.Checkpoint, lg.ID, when(lg.Until))}
	}
	return lostRow{Bad: true, Text: fmt.Sprintf("%s did not load and the input no longer holds its keys: %s keys forgotten, their repeats are forwarded until %s",
		what, count(lg.Keys), when(lg.Until))}
}

// when is an event time as the page shows it.
func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// progress is a partition's worker.Progress as the page shows it.
type progress struct {
	worker.Progress
	// What the phase reads: input before the start position, …
	What string
	// Fraction of the range done; Total is 0 when the range is unknown.
	Fraction float64
	Total    int64
}

// phases explains each worker.Progress phase.
var phases = map[string]string{
	"seeding":    "input before the start position, remembered, not forwarded",
	"replaying":  "input after the checkpoint, into the filter",
	"scanning":   "outputs, for records written but not committed",
	"rebuilding": "input read back into generations a restore lost",
}

func newView(st worker.Status, now time.Time) view {
	v := view{Status: st, Now: now, Refresh: RefreshSeconds}
	seen := make(map[int]bool, len(st.Partitions))
	var waiting []string
	mixed := false
	for i, p := range st.Partitions {
		r := row{PartitionStatus: p, ForwardLag: p.ForwardLag(), Running: p.State == "running" && p.Generation == st.Generation}
		for _, lg := range p.Lost {
			r.LostRows = append(r.LostRows, lostText(lg))
		}
		if pr := p.Progress; pr != nil {
			r.Progress = &progress{Progress: *pr, What: phases[pr.Phase], Fraction: pr.Fraction()}
			if pr.Topic != "" {
				r.Progress.What = "topic " + pr.Topic + ", remembered, not forwarded"
			}
			if pr.To > pr.From {
				r.Progress.Total = pr.To - pr.From
			}
		}
		v.Rows = append(v.Rows, r)
		if p.Stalled {
			v.Stalled = append(v.Stalled, stalledLine(p))
		}
		seen[p.Partition] = true
		v.TotalRate += p.Rate
		v.TotalLag += p.ForwardLag()
		v.TotalFill += p.FillLag
		v.TotalBytes += p.Filter.Bytes
		v.TotalKeys += p.Filter.EstKeys
		if !p.LastCheckpoint.IsZero() && (v.OldestCheckpoint.IsZero() || p.LastCheckpoint.Before(v.OldestCheckpoint)) {
			v.OldestCheckpoint = p.LastCheckpoint
		}
		if i == 0 || p.Topic == v.Topic {
			v.Topic = p.Topic
		} else {
			mixed = true
		}
		if r.Running {
			continue
		}
		what := p.Topic + "/" + strconv.Itoa(p.Partition) + " " + p.State
		switch pr := r.Progress; {
		case p.State == "running": // in an earlier generation
			what += " in generation " + strconv.Itoa(int(p.Generation))
		case pr == nil:
		case pr.Phase == p.State:
			what += " " + percent(pr.Fraction)
		default:
			what += " (" + pr.Phase + " " + percent(pr.Fraction) + ")"
		}
		waiting = append(waiting, what)
	}
	if mixed {
		v.Topic = ""
	}
	for _, a := range st.Assigned {
		if !seen[a] {
			waiting = append(waiting, "partition "+strconv.Itoa(a)+" not started")
		}
	}
	v.NotReady, v.Short = notReady(st, waiting)
	if n := len(v.Stalled); n > 0 && st.Ready {
		v.Short = fmt.Sprintf("%s, %d stalled", partitions(len(st.Assigned)), n)
	}
	return v
}

// stalledLine says where a stalled partition stands and why.
func stalledLine(p worker.PartitionStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%d %s at offset %s", p.Topic, p.Partition, p.State, offset(p.NextOffset))
	if u := p.Unwritable; u != nil {
		fmt.Fprintf(&b, ", before the record at offset %d (%s, %s) that %s does not take", u.Offset, u.Reason, byteSize(uint64(max(u.Size, 0))), u.Topic)
	}
	if p.StalledSeconds > 0 {
		fmt.Fprintf(&b, ", %s with input waiting and no progress", seconds(p.StalledSeconds))
	}
	if p.LastError != "" {
		b.WriteString(": " + p.LastError)
	}
	return b.String()
}

// notReady says why st is not ready, at length and in a few words, in the
// order /readyz checks; "" when it is ready.
func notReady(st worker.Status, waiting []string) (long, short string) {
	switch {
	case st.Error != "":
		return "the worker failed: " + st.Error, "worker failed"
	case st.Fenced != "":
		return "idle after being fenced: " + st.Fenced, "fenced"
	case !st.Joined && st.JoinError != "":
		return "not in a consumer group generation for " + seconds(st.UnjoinedSeconds) +
			"; joining fails: " + st.JoinError, "joining fails"
	case !st.Joined && st.UnjoinedSeconds > 0:
		return "not in a consumer group generation for " + seconds(st.UnjoinedSeconds) +
			"; waiting for the group coordinator to complete a rebalance", "not in a group"
	case !st.Joined:
		return "joining the consumer group", "joining the group"
	case st.Ready:
		return "", partitions(len(st.Assigned)) + " running"
	}
	n := len(waiting)
	if n == 0 { // a snapshot between the assignment and the first partition
		return "restoring partitions", "restoring partitions"
	}
	const show = 4
	list := strings.Join(waiting[:min(n, show)], ", ")
	if n > show {
		list += fmt.Sprintf(" and %d more", n-show)
	}
	of := fmt.Sprintf("%d of %s not running", n, partitions(max(len(st.Assigned), n)))
	return of + " yet: " + list, of
}

// partitions is "1 partition", "3 partitions".
func partitions(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return strconv.Itoa(n) + " partitions"
}

// Handler serves GET / (the HTML page) and GET /status.json (status() as
// JSON, encoded as the worker's own /status.json). status is called once
// per request and must be safe for concurrent use, as (*worker.Worker).Status
// is. Other paths answer 404, so the handler can be mounted next to the
// worker's /metrics, /healthz and /readyz:
//
//	mux.Handle("/", w.Handler(reg))
//	mux.Handle("GET /{$}", statuspage.Handler(w.Status))
func Handler(status func() worker.Status) http.Handler {
	return handler(status, time.Now)
}

func handler(status func() worker.Status, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, _ *http.Request) {
		var buf bytes.Buffer
		render(&buf, newView(status(), now()))
		h := rw.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Everything is inline: forbid anything else, scripts included.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = rw.Write(buf.Bytes())
	})
	mux.HandleFunc("GET /status.json", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
	return mux
}

// ageBars draws an age histogram (entries per generation, oldest first)
// as a row of block characters, each scaled to the largest.
func ageBars(ages []uint64) string {
	const levels = "▁▂▃▄▅▆▇█"
	var top uint64
	for _, a := range ages {
		top = max(top, a)
	}
	var b strings.Builder
	for _, a := range ages {
		i := 0
		if top > 0 {
			i = int((a*7 + top - 1) / top)
		}
		b.WriteRune([]rune(levels)[i])
	}
	return b.String()
}

// counts lists numbers as countOf writes them, comma-separated.
func counts(ns []uint64) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = countOf(n)
	}
	return strings.Join(parts, ", ")
}
