package worker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// recordingFilter logs every key it is given, in order, with the batch
// boundaries erased: one by one and batched calls must log the same.
type recordingFilter struct {
	exactFilter
	log []string
}

func (f *recordingFilter) TestAndAdd(key []byte, ts time.Time) bool {
	f.log = append(f.log, fmt.Sprintf("%s@%d", key, ts.Unix()))
	return f.exactFilter.TestAndAdd(key, ts)
}

func (f *recordingFilter) TestAndAddBatch(keys [][]byte, ts []time.Time, seen []bool) {
	for i, k := range keys {
		seen[i] = f.TestAndAdd(k, ts[i])
	}
}

// The filter sees through filterAhead exactly the calls that extracting and
// testing record by record in handle's order makes — rewound offsets,
// replay, bad keys under every policy, the stop under on-missing-key=fail
// and a stop record found in the skip set — and lookup returns the same
// results.
func TestFilterAheadMatchesRecordByRecord(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	policies := []MissingKeyPolicy{MissingKeyDeadLetter, MissingKeyForward, MissingKeyDrop, MissingKeyFail}
	for trial := range 400 {
		policy := policies[trial%len(policies)]
		var batch []kafka.Message
		off := int64(100 + r.IntN(5))
		for range r.IntN(60) {
			m := kafka.Message{Offset: off, Key: []byte(fmt.Sprintf("k%d", r.IntN(20))), Time: time.Unix(int64(1_700_000_000+r.IntN(100)), 0)}
			switch r.IntN(12) {
			case 0:
				m.Key = nil // null_key
			case 1:
				m.Value = []byte("malformed")
			}
			batch = append(batch, m)
			off += 1 + int64(r.IntN(2))
			if r.IntN(20) == 0 {
				off -= int64(r.IntN(4)) // a rewound fetch repeats offsets
			}
		}
		next, resume := int64(100+r.IntN(8)), int64(100+r.IntN(30))
		skipStop := r.IntN(2) == 0 // the stop record was written before a crash

		// Record by record, as handle did before batching.
		want := &recordingFilter{exactFilter: exactFilter{window: time.Hour, last: map[string]time.Time{}}}
		var wantSeen []string
		ex := keyExtractor{}
		n := next
		for i := range batch {
			m := &batch[i]
			if m.Offset < n {
				continue
			}
			key, err := ex.Extract(nil, m.Key, m.Value, m.Headers)
			if err == nil {
				s := want.TestAndAdd(key, m.Time)
				wantSeen = append(wantSeen, fmt.Sprint(i, s))
			} else if m.Offset >= resume && policy == MissingKeyFail && !skipStop {
				break
			}
			n = m.Offset + 1
		}

		// Through filterAhead and lookup, in handle's order.
		got := &recordingFilter{exactFilter: exactFilter{window: time.Hour, last: map[string]time.Time{}}}
		pp := &partitionProc{
			w:      &Worker{cfg: Config{OnMissingKey: policy}, deps: Deps{Extractor: ex}},
			filter: got, next: next, resume: resume,
		}
		ptrs := make([]*kafka.Message, len(batch))
		for i := range batch {
			ptrs[i] = &batch[i]
		}
		pp.filterAhead(ptrs)
		var gotSeen []string
		n = next
		for i := range batch {
			m := &batch[i]
			if m.Offset < n {
				continue
			}
			s, err := pp.lookup(i, m)
			if err == nil {
				gotSeen = append(gotSeen, fmt.Sprint(i, s))
			} else if m.Offset >= resume && policy == MissingKeyFail && !skipStop {
				break
			}
			n = m.Offset + 1
		}
		if !slices.Equal(got.log, want.log) {
			t.Fatalf("trial %d (%s, next %d, resume %d): filter calls\n got %v\nwant %v", trial, policy, next, resume, got.log, want.log)
		}
		if !slices.Equal(gotSeen, wantSeen) {
			t.Fatalf("trial %d: results\n got %v\nwant %v", trial, gotSeen, wantSeen)
		}
	}
}
