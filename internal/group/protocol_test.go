package group

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/consumer"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestSubscriptionRoundTrip(t *testing.T) {
	in := subscription{Topics: []string{"in"}, UserData: []byte(`{"v":1}`),
		Owned: []topicPartitions{{Topic: "in", Partitions: []int32{0, 3}}}, Generation: 7}
	b := encodeSubscription(in)
	out, err := decodeSubscription(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Version != subscriptionVersion || out.Generation != 7 || string(out.UserData) != `{"v":1}` ||
		!slices.Equal(partitionsOf(out.Owned, "in"), []int{0, 3}) || !slices.Equal(out.Topics, []string{"in"}) {
		t.Fatalf("decoded %+v", out)
	}
	// Other clients read it: franz-go's reader (as kfake and kgo do) and
	// kafka-go's version-1 reader (older bloomgate builds).
	var km kmsg.ConsumerMemberMetadata
	if err := km.ReadFrom(b); err != nil || km.Generation != 7 || len(km.OwnedPartitions) != 1 || string(km.UserData) != `{"v":1}` {
		t.Fatalf("franz-go reads %+v, %v", km, err)
	}
	var kg consumer.Subscription
	if err := protocol.Unmarshal(b, 1, &kg); err != nil || len(kg.OwnedPartitions) != 1 || string(kg.UserData) != `{"v":1}` {
		t.Fatalf("kafka-go reads %+v, %v", kg, err)
	}
}

// Every version other clients write is read: 0 (no owned partitions), 1,
// 3 (generation and rack id), as franz-go writes them.
func TestSubscriptionVersions(t *testing.T) {
	for v := int16(0); v <= 3; v++ {
		km := kmsg.NewConsumerMemberMetadata()
		km.Version = v
		km.Topics = []string{"in"}
		km.UserData = []byte("u")
		if v >= 1 {
			km.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "in", Partitions: []int32{2, 1}}}
		}
		km.Generation = 5
		rack := "r1"
		km.Rack = &rack
		s, err := decodeSubscription(km.AppendTo(nil))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		wantOwned, wantGen := []int{1, 2}, int32(5)
		if v == 0 {
			wantOwned = nil
		}
		if v < 2 {
			wantGen = noGeneration
		}
		if got := partitionsOf(s.Owned, "in"); !slices.Equal(got, wantOwned) || s.Generation != wantGen || string(s.UserData) != "u" {
			t.Errorf("v%d: owned %v generation %d user data %q", v, got, s.Generation, s.UserData)
		}
	}
}

// Lengths a member writes are bounded by the bytes there: a subscription
// or assignment announcing two billion partitions in a few bytes is
// refused without allocating for them.
func TestDecodeBoundsLengths(t *testing.T) {
	huge := binary.BigEndian.AppendUint16(nil, 1)
	huge = binary.BigEndian.AppendUint32(huge, 1)
	huge = appendString(huge, "in")
	huge = binary.BigEndian.AppendUint32(huge, 0x7fffffff) // partitions
	huge = append(huge, 0, 0, 0, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := decodeAssignment(huge); err == nil {
			t.Fatal("accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if b := after.TotalAlloc - before.TotalAlloc; b > 1<<20 {
		t.Errorf("%d bytes allocated for 10 assignments of %d bytes", b, len(huge))
	}
	for _, b := range [][]byte{{0}, {0, 1, 0x80, 0, 0, 0}, {0, 1, 0, 0, 0, 1, 0, 9, 'a'}} {
		if _, err := decodeSubscription(b); err == nil {
			t.Errorf("%x: accepted", b)
		}
	}
	if tps, err := decodeAssignment(nil); err != nil || tps != nil {
		t.Errorf("empty assignment: %v %v", tps, err)
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	b := encodeAssignment("in", []int{4, 1})
	tps, err := decodeAssignment(b)
	if err != nil || !slices.Equal(partitionsOf(tps, "in"), []int{1, 4}) {
		t.Fatalf("%v %v", tps, err)
	}
	var km kmsg.ConsumerMemberAssignment
	if err := km.ReadFrom(b); err != nil || len(km.Topics) != 1 || len(km.Topics[0].Partitions) != 2 {
		t.Fatalf("franz-go reads %+v, %v", km, err)
	}
}

func FuzzDecodeSubscription(f *testing.F) {
	f.Add(encodeSubscription(subscription{Topics: []string{"a"}, Owned: []topicPartitions{{Topic: "a", Partitions: []int32{1}}}, Generation: 3}))
	f.Add(encodeAssignment("a", []int{0, 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := decodeSubscription(b); err == nil {
			// What decodes encodes back to what decodes alike.
			s2, err := decodeSubscription(encodeSubscription(s))
			if err != nil || !slices.Equal(partitionsOf(s.Owned, "a"), partitionsOf(s2.Owned, "a")) || string(s.UserData) != string(s2.UserData) {
				t.Fatalf("%+v re-read as %+v (%v)", s, s2, err)
			}
		}
		if tps, err := decodeAssignment(b); err == nil {
			n := 0
			for _, tp := range tps {
				n += 4 * len(tp.Partitions)
			}
			if n > len(b) {
				t.Fatalf("%d partitions from %d bytes", n/4, len(b))
			}
		}
	})
}
