package worker

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc64"
	"time"

	"github.com/segmentio/kafka-go"
)

// The input's log may be deleted and re-created, truncated by an unclean
// leader election, or shortened by retention before the worker read it.
// Then the committed offset and the checkpoint's input offset are hints,
// not the truth (DESIGN.md, "Trust boundaries"): nothing in the new log may
// be skipped. Recovery checks the log against what the memory knows of it
// (checkInputLog) before deciding where to read:
//
//   - A checkpoint records an InputMark: one data record of the log below
//     its input offset (the last one handled), by offset, timestamp and a
//     digest of key and value. If the log still holds that offset and the
//     record there differs, the log was re-created: reading goes on from
//     the log start with the memory kept (repeats of remembered keys are
//     still caught), and nothing the written topics hold counts as written
//     for it.
//   - A committed offset or checkpoint beyond the high-water mark: the log
//     was re-created, or truncated. If the mark still matches, it is the
//     same log cut short (an unclean leader election): the log is the
//     memory's up to the checkpoint, the records after the truncation
//     point are gone, and new ones may already hold their offsets.
//     Reading goes on from the checkpoint, every record processed as new
//     input: nothing is lost, but records between the checkpoint and the
//     truncation point, which were forwarded before it, are forwarded
//     again (they cannot be told from new records at reused offsets
//     without the leader epoch of the last record read, KIP-320's
//     OffsetForLeaderEpoch, which kafka-go's protocol layer does not
//     have). The log line gives the bound. Without a matching mark the
//     log cannot be told apart from a re-created one: as above.
//   - A committed offset below the log start: retention deleted records
//     before they were processed. They are lost upstream; reading goes on
//     from the log start.
//
// After a re-created or truncated log, what the written topics hold was
// written for records that are gone: none of it counts as written (the
// recovery scan reads nothing), and a checkpoint and then a commit of the
// new position are stored before anything is read, so that a successor
// neither resumes in the middle of the new log nor meets those records.
//
// Each case is logged at ERROR (topic, partition, committed offset, the
// new range, and offsets lost), counted in bloomgate_input_resets_total
// and bloomgate_input_offsets_lost_total, and alerted on
// (BloomgateInputLogReset).

// InputMark identifies one data record of the input by offset, timestamp
// and a digest of its key and value (null and empty told apart).
type InputMark struct {
	Offset    int64
	Timestamp int64 // Unix ms
	Digest    uint64
}

var crcTable = crc64.MakeTable(crc64.ECMA)

// markOf computes the mark of a record.
func markOf(m *kafka.Message) InputMark {
	return InputMark{Offset: m.Offset, Timestamp: m.Time.UnixMilli(), Digest: recordDigest(m.Key, m.Value)}
}

func recordDigest(key, value []byte) uint64 {
	var h uint64
	for _, b := range [][]byte{key, value} {
		var l [binary.MaxVarintLen64 + 1]byte
		n := 1
		if b != nil {
			l[0] = 1
			n += binary.PutUvarint(l[1:], uint64(len(b)))
		}
		h = crc64.Update(h, crcTable, l[:n])
		h = crc64.Update(h, crcTable, b)
	}
	return h
}

// Reasons of bloomgate_input_resets_total.
const (
	resetRecreated = "recreated" // another log than the memory's: read from its start
	resetTruncated = "truncated" // the memory's log cut short: resume at its end
	resetRetention = "retention" // committed offset below the log start: offsets lost upstream
)

var resetReasons = []string{resetRecreated, resetTruncated, resetRetention}

// logCheck is what checkInputLog found.
type logCheck struct {
	reason string // "" (the log is as the memory knows it) or a reset reason
	lost   int64  // offsets lost upstream (retention)
	why    string // for the log line
}

// checkInputLog compares the input's log bounds ib with the committed
// offset a (-1: none) and the restored checkpoint (see the top of this
// file).
func (pp *partitionProc) checkInputLog(ctx context.Context, restored *Restored, ib offsetBounds, a int64) logCheck {
	c := restored.InputOffset
	mark := restored.Mark
	same, known := false, false
	if c >= 0 && mark != nil && mark.Offset >= ib.first && mark.Offset < ib.last && mark.Offset < c {
		same, known = pp.sameRecord(ctx, *mark)
	}
	switch {
	case known && !same:
		return logCheck{reason: resetRecreated, why: fmt.Sprintf(
			"the record at offset %d is not the one the checkpoint recorded there: the topic was deleted and re-created", mark.Offset)}
	case c > ib.last || a > ib.last:
		if known && same && c <= ib.last {
			return logCheck{reason: resetTruncated, why: fmt.Sprintf(
				"the log ends at %d below the committed offset %d, and the record at %d is still the one the checkpoint recorded: "+
					"the log was truncated (an unclean leader election) and new records may hold the lost offsets; "+
					"up to %d records from the checkpoint at %d to the log's end may have been forwarded before and are forwarded again",
				ib.last, a, mark.Offset, ib.last-c, c)}
		}
		return logCheck{reason: resetRecreated, why: fmt.Sprintf(
			"the committed offset %d or the checkpoint's %d lies beyond the log's end %d: the topic was deleted and re-created, or truncated",
			a, c, ib.last)}
	case a >= 0 && a < ib.first:
		return logCheck{reason: resetRetention, lost: ib.first - a, why: fmt.Sprintf(
			"the committed offset %d lies below the log start %d: retention deleted %d records before they were processed",
			a, ib.first, ib.first-a)}
	}
	return logCheck{}
}

// sameRecord reads the record at mark.Offset and reports whether it is the
// marked one; known is false if it could not tell (the record is gone, as
// after compaction, or the read failed).
func (pp *partitionProc) sameRecord(ctx context.Context, mark InputMark) (same, known bool) {
	f, err := pp.w.newFetcher(pp.w.cfg.Input, pp.p, mark.Offset)
	if err != nil {
		return false, false
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for fctx.Err() == nil {
		c, err := f.Fetch(fctx)
		if err != nil {
			pp.log.Warn("reading the checkpoint's input mark failed; the log's identity is not checked this time",
				"offset", mark.Offset, "err", err)
			return false, false
		}
		for i := range c.Records {
			r := &c.Records[i]
			if r.Offset < mark.Offset {
				continue
			}
			if r.Offset > mark.Offset {
				return false, false
			}
			return markOf(r) == mark, true
		}
		if c.Next > mark.Offset {
			return false, false // a marker or an aborted record there now
		}
	}
	return false, false
}

// reportReset logs and counts what checkInputLog found.
func (pp *partitionProc) reportReset(chk logCheck, ib offsetBounds, a, c int64, resume int64) {
	w := pp.w
	w.m.inputResets.WithLabelValues(w.cfg.Input, chk.reason).Inc()
	if chk.lost > 0 {
		w.m.inputLost.WithLabelValues(w.cfg.Input).Add(float64(chk.lost))
	}
	what := map[string]string{
		resetRecreated: "reading from the log start with the memory kept: repeats of remembered keys are still caught, nothing of the new log is skipped",
		resetTruncated: "reading on from the checkpoint with the memory kept, every record as new input",
		resetRetention: "reading from the log start; the deleted records are lost upstream",
	}[chk.reason]
	pp.log.Error(fmt.Sprintf("input %s/%d: %s; %s", w.cfg.Input, pp.p, chk.why, what),
		"reason", chk.reason, "committed_offset", a, "checkpoint_offset", c,
		"log_start", ib.first, "log_end", ib.last, "offsets_lost", chk.lost, "resume_offset", resume)
}
