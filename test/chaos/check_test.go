package chaos_test

import (
	"strings"
	"testing"
)

// TestCheck pins the checker itself on small hand-made cases, so that a
// passing chaos run means what it says.
func TestCheck(t *testing.T) {
	names := topicNames{Input: "in", Output: "out", Duplicates: "dup", DeadLetter: "dlq"}
	input := [][]inRec{
		{{0, "a", false}, {1, "b", false}, {2, "a", false}, {3, "BAD-1", true}},
		{{0, "c", false}, {1, "c", false}},
	}
	good := func() []outRec {
		return []outRec{
			{Topic: "out", Key: "a", SrcPart: 0, SrcOffset: 0},
			{Topic: "out", Key: "b", SrcPart: 0, SrcOffset: 1},
			{Topic: "dup", Key: "a", SrcPart: 0, SrcOffset: 2},
			{Topic: "dlq", Key: "BAD-1", SrcPart: 0, SrcOffset: 3},
			{Topic: "out", Key: "c", SrcPart: 1, SrcOffset: 0},
			{Topic: "dup", Key: "c", SrcPart: 1, SrcOffset: 1},
		}
	}
	committed := []int64{4, 2}
	tests := []struct {
		name   string
		edit   func([]outRec) []outRec
		fpr    float64
		wantOK bool
		want   string // in the summary
	}{
		{"all accounted for", func(o []outRec) []outRec { return o }, 1e-9, true, ""},
		{"lost first occurrence", func(o []outRec) []outRec { return o[1:] }, 1e-9, false, "lost (written nowhere): 1"},
		{"unprocessed", func(o []outRec) []outRec { return o[:5] }, 1e-9, false, "lost (written nowhere): 1"},
		{"written twice", func(o []outRec) []outRec { return append(o, o[1]) }, 1e-9, false, "written more than once: 1"},
		{"duplicate forwarded", func(o []outRec) []outRec { o[2].Topic = "out"; return o }, 1e-9, false, "repeated key on the output"},
		{"bad event forwarded", func(o []outRec) []outRec { o[3].Topic = "out"; return o }, 1e-9, false, "misrouted"},
		{"good event dead-lettered", func(o []outRec) []outRec { o[1].Topic = "dlq"; return o }, 1e-9, false, "misrouted"},
		{"orphan", func(o []outRec) []outRec {
			return append(o, outRec{Topic: "out", Key: "z", SrcPart: 0, SrcOffset: 99})
		}, 1e-9, false, "naming no input record"},
		{"key mismatch", func(o []outRec) []outRec { o[1].Key = "x"; return o }, 1e-9, false, "key differs"},
		// A false positive (first occurrence on the duplicates topic) is
		// allowed within the bound; fpBound(3, p) >= 5 always.
		{"false positive within bound", func(o []outRec) []outRec { o[1].Topic = "dup"; return o }, 0.01, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := check(names, input, tt.edit(good()), committed, tt.fpr, false)
			if v.ok() != tt.wantOK {
				t.Fatalf("ok = %v, want %v; summary:\n%s", v.ok(), tt.wantOK, v.summary())
			}
			if tt.want != "" && !strings.Contains(v.summary(), tt.want) {
				t.Fatalf("summary lacks %q:\n%s", tt.want, v.summary())
			}
		})
	}

	v := check(names, input, good(), committed, 0.01, false)
	if v.Events != 6 || v.UniqueKeys != 3 || v.DuplicateEvents != 2 || v.BadEvents != 1 {
		t.Fatalf("counts: %+v", v)
	}
	if pc := v.PerPartition[0]; pc.Consumed != 4 || pc.Forwarded != 2 || pc.Duplicates != 1 || pc.DeadLetters != 1 {
		t.Fatalf("partition 0: %+v", pc)
	}
	v = check(names, input, good()[:5], committed, 0.01, false)
	if len(v.Unprocessed) != 0 {
		t.Fatalf("record 1@1 is below the committed offset 2, yet counted unprocessed")
	}
	v = check(names, input, good()[:5], []int64{4, 1}, 0.01, false)
	if len(v.Unprocessed) != 1 {
		t.Fatalf("record 1@1 is at the committed offset 1, yet not counted unprocessed: %s", v.summary())
	}
}

func TestFPBound(t *testing.T) {
	// 150k keys at 1 %: mean 1500, sigma ~38.5.
	if b := fpBound(150000, 0.01); b < 1690 || b > 1700 {
		t.Fatalf("fpBound(150000, 0.01) = %d", b)
	}
}

func TestParseLogKV(t *testing.T) {
	kv := parseLogKV(`time=2026-01-01T00:00:00Z level=INFO msg="partition recovered" partition=3 took=12.5ms err="a \"b\" c"`)
	if kv["msg"] != "partition recovered" || kv["partition"] != "3" || kv["took"] != "12.5ms" || kv["err"] != `a "b" c` {
		t.Fatalf("%q", kv)
	}
}

// TestCheckRepartition pins the checker's repartition mode: records are
// traced by their origin headers; a copy of an input record (the hop is
// at-least-once) on the duplicates or dead-letter topic is fine, on the
// output a second time it is not.
func TestCheckRepartition(t *testing.T) {
	names := topicNames{Input: "in", Output: "out", Duplicates: "dup", DeadLetter: "dlq"}
	input := [][]inRec{{{0, "a", false}, {1, "b", false}, {2, "a", false}, {3, "BAD-1", true}}}
	at := func(topic string, off int64) outRec {
		// The src headers name the repartition topic, not the input; the
		// key is the hop's hash of the input's.
		return outRec{Topic: topic, Key: "hash-" + input[0][off].Key, SrcPart: 5, SrcOffset: 1000 + off, OriginPart: 0, OriginOffset: off}
	}
	good := func() []outRec {
		return []outRec{at("out", 0), at("out", 1), at("dup", 2), at("dlq", 3),
			at("dup", 0), at("dup", 2), at("dlq", 3)} // the hop's copies
	}
	for _, tt := range []struct {
		name string
		recs []outRec
		want string
	}{
		{"copies are duplicates", good(), ""},
		{"a copy forwarded again", append(good(), at("out", 1)), "written more than once: 1"},
		{"a repeat forwarded", append(good()[:2], at("out", 2), at("dlq", 3)), "repeated key on the output"},
		{"a first occurrence only as a duplicate", []outRec{at("dup", 0), at("out", 1), at("dup", 2), at("dlq", 3)}, ""},
		{"lost", good()[1:4], "lost (written nowhere): 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := check(names, input, tt.recs, []int64{4}, 1e-9, true)
			switch {
			case tt.want == "" && tt.name != "a first occurrence only as a duplicate" && !v.ok():
				t.Errorf("verdict not ok: %s", v.summary())
			case tt.want != "" && (v.ok() || !strings.Contains(v.summary(), tt.want)):
				t.Errorf("summary %q lacks %q (ok %v)", v.summary(), tt.want, v.ok())
			}
			if tt.name == "a first occurrence only as a duplicate" && len(v.FalsePositives) != 1 {
				t.Errorf("false positives %v, want the first occurrence", v.FalsePositives)
			}
		})
	}
}
