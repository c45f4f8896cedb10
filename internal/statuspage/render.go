package statuspage

import (
	"bytes"
	_ "embed"
	"fmt"
	"html"
	"strconv"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// The page is written by render, in Go, not by html/template: text/template
// looks methods up by name at run time (reflect's MethodByName), and
// wherever that is linked the Go linker keeps every exported method of
// every type in the executable, used or not. Here that was the S3 client's
// hundred-odd operations and the like: 7.8 MB of a 26 MB executable, whose
// mapped pages count in every worker's resident memory (docs/benchmarks-journal.md,
// "The worker's executable"). Every value that comes from the status goes
// through esc; the rest is constant markup.

//go:embed style.css
var style string

// esc escapes s for HTML text and quoted attribute values.
func esc(s string) string { return html.EscapeString(s) }

// out appends markup and escaped values to a buffer.
type out struct{ *bytes.Buffer }

// w appends each part as it is (markup, or values already escaped).
func (o out) w(parts ...string) {
	for _, p := range parts {
		o.WriteString(p)
	}
}

// pick is a if cond holds, else b.
func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

func itoa[T ~int | ~int32 | ~int64](n T) string { return strconv.FormatInt(int64(n), 10) }

// render writes the page for v.
func render(b *bytes.Buffer, v view) {
	o := out{b}
	o.w(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="`, itoa(v.Refresh), `">
<title>bloomgate status</title>
<style>
`, style, `</style>
</head>
<body>
<h1>bloomgate</h1>
<div class="summary">
`)
	renderCards(o, v)
	o.w("</div>\n")
	switch {
	case v.Error != "":
		o.w(`<div class="notice err" id="error"><b>Worker failed:</b> `, esc(v.Error), "</div>\n")
	case v.NotReady != "":
		o.w(`<div class="notice wait" id="not-ready"><b>Not ready:</b> `, esc(v.NotReady), ".</div>\n")
	}
	if len(v.Stalled) > 0 {
		o.w(`<div class="notice err" id="stalled"><b>Stalled:</b>`)
		for _, s := range v.Stalled {
			o.w("<div>", esc(s), "</div>")
		}
		o.w("</div>\n")
	}
	renderGroup(o, v)
	if x := v.CrossPartition; x != nil {
		o.w(`<div class="notice err" id="cross-partition"><b>Input not keyed by the dedup key:</b> `, esc(count(x.Repeats)),
			` sampled keys came again in another partition (the last in partitions `, itoa(x.Partitions[0]), ` and `, itoa(x.Partitions[1]),
			", ", esc(age(v.Now, x.Last)), `); repeats in other partitions are forwarded as new. Fix: --repartition, or producers keyed by the dedup key.</div>`+"\n")
	}
	if len(v.Rows) == 0 {
		o.w("\n", `<p id="no-partitions">No partitions assigned`, pick(v.Joined, "", ": joining the consumer group"), ".</p>\n")
	} else {
		renderTable(o, v)
	}
	member := v.MemberID
	if member == "" {
		member = "–"
	}
	o.w("\n<footer>member ", esc(member), " · refreshed ", v.Now.UTC().Format("2006-01-02 15:04:05 UTC"), ", every ", itoa(v.Refresh), ` s ·
<a href="status.json">status.json</a> · <a href="metrics">metrics</a></footer>
</body>
</html>
`)
}

// renderGroup writes what is amiss in the consumer group: members that
// are not bloomgate workers, members with other settings, and partitions
// no member that agrees with this worker processes.
func renderGroup(o out, v view) {
	if len(v.ForeignMembers)+len(v.SettingsConflicts)+len(v.Unprocessed) == 0 {
		return
	}
	o.w(`<div class="notice err" id="group-problems"><b>Consumer group:</b>`)
	for _, f := range v.ForeignMembers {
		holds := "holds no partitions"
		if len(f.Holds) > 0 {
			holds = "holds partitions " + fmt.Sprint(f.Holds) + ", consumed and committed without deduplication"
		}
		o.w("<div>member ", esc(f.Member), " (client id ", esc(f.ClientID), ", host ", esc(f.Host), ") is not a bloomgate worker and ",
			esc(holds), ": give it its own group id</div>")
	}
	for _, c := range v.SettingsConflicts {
		o.w("<div>member ", esc(c.Member), " runs with other settings: ", esc(strings.Join(c.Diffs, "; ")), "</div>")
	}
	if len(v.Unprocessed) > 0 {
		o.w("<div>partitions ", esc(fmt.Sprint(v.Unprocessed)), " (", esc(countOf(v.UnprocessedLag)),
			" records waiting) are processed by no bloomgate worker of the group that agrees with this one</div>")
	}
	o.w("</div>\n")
}

// renderCards writes the summary's cards.
func renderCards(o out, v view) {
	o.w(`  <div class="card"><b id="ready" class="`, pick(v.Ready, "ok", "bad"), `">`, pick(v.Ready, "ready", "not ready"),
		`</b><span id="ready-detail">`, esc(v.Short), "</span></div>\n")
	group := "consumer group"
	switch {
	case v.Joined:
		group = "group generation " + itoa(v.Generation)
	case v.UnjoinedSeconds > 0:
		group = "for " + seconds(v.UnjoinedSeconds)
	}
	o.w(`  <div class="card"><b id="group" class="`, pick(v.Joined, "ok", "bad"), `">`, pick(v.Joined, "joined", "not joined"),
		`</b><span id="group-detail">`, esc(group), "</span></div>\n")
	o.w(`  <div class="card"><b>`, esc(rate(v.TotalRate)), "</b><span>records/s consumed</span></div>\n")
	o.w(`  <div class="card"><b id="total-lag">`, esc(countOf(v.TotalLag)), "</b><span>total lag (to forward)</span></div>\n")
	if v.TotalFill > 0 {
		o.w(`  <div class="card"><b id="total-fill">`, esc(countOf(v.TotalFill)), "</b><span>offsets to seed or replay (not forwarded)</span></div>\n")
	}
	if len(v.Partitions) > 0 {
		o.w(`  <div class="card"><b>`, esc(count(v.TotalKeys)), "</b><span>keys remembered (est.)</span></div>\n")
		o.w(`  <div class="card"><b id="filter-memory">`, esc(byteSize(v.TotalBytes)), "</b><span>filter memory allocated now")
		if v.PlannedFilterBytes > 0 {
			o.w("<br>of ", esc(byteSize(v.PlannedFilterBytes)), " planned (allocated as keys arrive)")
		}
		o.w("</span></div>\n")
		o.w(`  <div class="card"><b>`, esc(age(v.Now, v.OldestCheckpoint)), "</b><span>oldest last checkpoint</span></div>\n")
	}
}

// renderTable writes the partitions' table.
func renderTable(o out, v view) {
	o.w(`
<div class="scroll">
<table id="partitions">
<thead>
<tr>
  <th rowspan="2" class="l">`)
	if v.Topic != "" {
		o.w(esc(v.Topic), " ")
	}
	o.w(`partition</th><th rowspan="2" class="l">state</th>
  <th colspan="3" class="group g">input</th>
  <th colspan="5" class="group g">records</th>
  <th colspan="4" class="group g">filter</th>
  <th rowspan="2" class="l g">last checkpoint<small>offset</small></th>
</tr>
<tr>
  <th class="g">next offset<small>committed</small></th><th>lag</th><th>records/s</th>
  <th class="g">consumed</th><th>forwarded</th><th>duplicates</th><th>dead-lettered</th><th>dropped</th>
  <th class="l g">fill (newest)</th><th>est. keys</th><th>est. FPR</th><th>memory</th>
</tr>
</thead>
<tbody>`)
	for _, r := range v.Rows {
		renderRow(o, v, r)
	}
	o.w(`
</tbody>
</table>
</div>
`)
}

// renderRow writes a partition's row, and the row below it with its
// progress, errors and lost generations when it has any.
func renderRow(o out, v view, r row) {
	o.w("\n", `<tr data-partition="`, itoa(r.Partition), `" data-topic="`, esc(r.Topic), `">
  <td class="l name">`)
	if v.Topic != "" {
		o.w(itoa(r.Partition))
	} else {
		o.w(esc(r.Topic), "/", itoa(r.Partition))
	}
	o.w("</td>\n")
	stateCell(o, r)
	o.w("</td>\n", `  <td class="g">`, esc(offset(r.NextOffset)), "<small>", esc(offset(r.Committed)), "</small></td>\n")
	lagCell(o, r)
	o.w("</td>\n  <td>", esc(rate(r.Rate)), "</td>\n", `  <td class="g">`, esc(count(r.Consumed)))
	if n := r.SkippedMarkers + r.SkippedAborted; n > 0 {
		o.w(`<small title="offsets that are not events: transaction markers and records of aborted transactions">+`, esc(count(n)), " skipped</small>")
	}
	o.w("</td>\n  <td>", esc(count(r.Forwarded)), "</td><td>", esc(count(r.Duplicates)), "</td>\n")
	o.w("  <td", pick(r.DeadLettered > 0, ` class="warn"`, ""), ">", esc(count(r.DeadLettered)), "</td>\n")
	o.w("  <td", pick(r.Dropped > 0, ` class="warn"`, ""), ">", esc(count(r.Dropped)), "</td>")
	filterCells(o, r.Filter)
	o.w("\n", `  <td class="l g">`, esc(age(v.Now, r.LastCheckpoint)))
	if r.LastCheckpointOffset >= 0 {
		o.w("<small>", itoa(r.LastCheckpointOffset), "</small>")
	}
	if r.CheckpointError != "" {
		o.w(`<small class="bad">failing</small>`)
	}
	o.w("</td>\n</tr>")
	if r.Progress == nil && r.CheckpointError == "" && !r.Stalled && len(r.LostRows) == 0 {
		return
	}
	moreRow(o, v, r)
}

// stateCell writes a partition's state cell: running, stalled, commits
// paused, the last recovery's time.
func stateCell(o out, r row) {
	o.w(`  <td class="l"><span class="`, pick(r.Stalled, "bad", pick(r.Running, "ok", "warn")), `">`, esc(r.State), "</span>")
	if r.Stalled {
		o.w(`<small class="bad">stalled`)
		if r.StalledSeconds > 0 {
			o.w(" ", esc(seconds(r.StalledSeconds)))
		}
		o.w("</small>")
	}
	if r.CommitsPaused {
		o.w(`<small class="bad">commits paused</small>`)
	}
	if r.Running && r.RecoverySeconds > 0 {
		o.w(`<small title="replayed `, itoa(r.RecoveryReplayed), " records; ", itoa(r.RecoverySkipped), ` found already written">recovery `,
			esc(seconds(r.RecoverySeconds)), "</small>")
	}
}

// lagCell opens the lag cell: records to forward, records to replay or
// seed, records behind an open transaction.
func lagCell(o out, r row) {
	o.w("  <td>", esc(countOf(r.ForwardLag)))
	if r.FillLag > 0 {
		to := "replay"
		if r.Progress != nil && r.Progress.Phase == "seeding" {
			to = "seed"
		}
		o.w(`<small class="fill" title="input before the resume offset, read into the filter without being forwarded">+`, esc(countOf(r.FillLag)), " to ", to, "</small>")
	}
	if r.LSOLag > 0 {
		o.w(`<small class="warn" title="offsets behind an upstream transaction that is still open: read_committed waits at the last stable offset">`,
			esc(countOf(r.LSOLag)), " in open txn</small>")
	}
}

// filterCells writes the filter's cells (fill, keys, false-positive rate,
// bytes), or dashes before the partition has a filter.
func filterCells(o out, f worker.FilterStats) {
	if f.Generations != 0 {
		o.w("\n", `  <td class="l g"><span class="bar"><i style="width: `, esc(barWidth(f.Fill)), `"></i></span>`, esc(percent(f.Fill)),
			"<small>", itoa(f.Generations), " generation", pick(f.Generations != 1, "s", ""), "</small>")
		if f.Layout != "" {
			o.w(`<small title="layout of the fingerprint table taking inserts">`, esc(f.Layout), "</small>")
		}
		if len(f.Ages) > 0 {
			o.w(`<small class="ages" title="age histogram: entries per generation, oldest first: `, esc(counts(f.Ages)), `">`, esc(ageBars(f.Ages)), "</small>")
		}
		o.w("</td>\n  <td>", esc(count(f.EstKeys)))
		if f.ClampedTimestamps > 0 {
			o.w(`<small class="warn" title="records filed earlier than their timestamp, which was too far ahead of the partition's event time">`,
				esc(count(f.ClampedTimestamps)), " clamped</small>")
		}
		o.w("</td>\n  <td>", esc(percent(f.EstFPR)))
		if x := f.Exact; x != nil {
			o.w(`<small title="exact mode: filter positives the exact store refuted (false positives avoided, forwarded); `, esc(count(x.Keys)), " keys, ",
				esc(byteSize(x.DiskBytes)), ` on disk">`, esc(count(x.RefutedPositives)), " refuted</small>")
		}
		o.w("</td>\n  <td>", esc(byteSize(f.Bytes)))
		if f.OverflowStacks > 0 {
			o.w(`<small class="warn" title="overflow stacks: generations added beyond the plan because one filled before its time was up">`,
				itoa(f.OverflowStacks), " overflow</small>")
		}
		o.w("</td>")
	} else {
		o.w("\n", `  <td class="l g" title="no filter yet">–</td><td>–</td><td>–</td><td>–</td>`)
	}
}

// moreRow writes the row below a partition's with its progress, checkpoint
// error, stall and lost generations, if it has any.
func moreRow(o out, v view, r row) {
	o.w("\n", `<tr class="more" data-partition="`, itoa(r.Partition), `">
  <td></td><td colspan="14">`)
	if r.Progress != nil {
		progressDiv(o, r.Progress)
	}
	if r.CheckpointError != "" {
		o.w(`<div class="bad">checkpoint failing: `, esc(r.CheckpointError), "</div>")
	}
	if r.Stalled {
		o.w(`<div class="bad stalled">stalled at offset `, esc(offset(r.NextOffset)))
		if u := r.Unwritable; u != nil {
			o.w(", before the record at offset ", itoa(u.Offset), ": ", esc(u.Reason), ", ", esc(byteSize(uint64(max(u.Size, 0)))), " for ", esc(u.Topic),
				"; next try ", esc(in(v.Now, u.NextRetry)))
		}
		if r.LastError != "" {
			o.w(": ", esc(r.LastError))
		}
		o.w("</div>")
	}
	for _, l := range r.LostRows {
		o.w(`<div class="`, pick(l.Bad, "bad", "warn"), ` lost">`, esc(l.Text), "</div>")
	}
	o.w("</td>\n</tr>")
}

// progressDiv writes a long piece of work's progress: phase, bar, offsets,
// keys, rate and time left.
func progressDiv(o out, p *progress) {
	o.w(`<div class="progress"><span class="phase warn">`, esc(p.Phase), "</span>")
	if p.What != "" {
		o.w(` <span class="what" title="`, esc(p.What), `">`, esc(p.What), "</span>")
	}
	o.w("\n", `    <span class="bar wide"><i style="width: `, esc(barWidth(p.Fraction)), `"></i></span>`, "\n", `    <span class="nums">`)
	if p.Total != 0 {
		o.w("<b>", esc(percent(p.Fraction)), "</b> · ", esc(countOf(p.Done)), " of ", esc(countOf(p.Total)), " offsets (",
			esc(offset(p.From)), " → ", esc(offset(p.To)), ")")
	} else {
		o.w(esc(countOf(p.Done)), " offsets from ", esc(offset(p.From)))
	}
	o.w("\n    · ", esc(count(p.Keys)), " keys · ", esc(rate(p.Rate)), "/s · ")
	if p.ETASeconds > 0 {
		o.w(esc(seconds(p.ETASeconds)), " left")
	} else {
		o.w("time left unknown")
	}
	o.w("</span></div>")
}

// in is when t comes, from now: "now" once it is due.
func in(now, t time.Time) string {
	if !t.After(now) {
		return "now"
	}
	return "in " + duration(t.Sub(now))
}
