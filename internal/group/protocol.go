package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The consumer protocol's metadata (ConsumerProtocolSubscription) and
// assignment (ConsumerProtocolAssignment), written and read here rather
// than with kafka-go's protocol/consumer types: those stop at version 1, so
// a subscription cannot name the generation its owned partitions are from
// (version 2, KIP-792), and their decoder sizes arrays by the length a
// member wrote before checking that the bytes are there. Anything that
// joins the group writes these bytes; the reader bounds every length by
// the bytes left, reads the fields of the versions it knows and ignores
// what later versions append (rack id, version 3), as Kafka's own clients
// do.

// subscriptionVersion is the version this member writes: owned partitions
// (1) and their generation (2).
const subscriptionVersion = 2

// noGeneration is the generation of a subscription that names none
// (versions 0 and 1), as in Kafka's protocol.
const noGeneration = -1

// subscription is a member's group protocol metadata.
type subscription struct {
	Version  int16
	Topics   []string
	UserData []byte
	Owned    []topicPartitions
	// Generation is the generation the owned partitions were assigned
	// in; noGeneration when the member does not say.
	Generation int32
}

type topicPartitions struct {
	Topic      string
	Partitions []int32
}

// errProtocol: bytes that are not the consumer protocol.
var errProtocol = errors.New("not consumer protocol metadata")

func encodeSubscription(s subscription) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(subscriptionVersion))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Topics)))
	for _, t := range s.Topics {
		b = appendString(b, t)
	}
	if s.UserData == nil {
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	} else {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.UserData)))
		b = append(b, s.UserData...)
	}
	b = appendTopicPartitions(b, s.Owned)
	return binary.BigEndian.AppendUint32(b, uint32(s.Generation))
}

func decodeSubscription(b []byte) (subscription, error) {
	r := reader{b: b}
	s := subscription{Version: r.int16(), Generation: noGeneration}
	if n := r.count(2); n >= 0 {
		s.Topics = make([]string, 0, n)
		for range n {
			s.Topics = append(s.Topics, r.string())
		}
	}
	s.UserData = r.bytes()
	if s.Version >= 1 && r.err == nil && len(r.b) > 0 {
		s.Owned = r.topicPartitions()
	}
	if s.Version >= 2 && r.err == nil && len(r.b) >= 4 {
		s.Generation = r.int32()
	}
	if r.err != nil || s.Version < 0 {
		return subscription{}, fmt.Errorf("%w (%d bytes)", errProtocol, len(b))
	}
	return s, nil
}

// encodeAssignment writes an assignment of partitions of topic (version 1,
// which every version since reads alike).
func encodeAssignment(topic string, partitions []int) []byte {
	var tps []topicPartitions
	if len(partitions) > 0 {
		tp := topicPartitions{Topic: topic, Partitions: make([]int32, len(partitions))}
		for i, p := range partitions {
			tp.Partitions[i] = int32(p)
		}
		tps = []topicPartitions{tp}
	}
	b := binary.BigEndian.AppendUint16(nil, 1)
	b = appendTopicPartitions(b, tps)
	return binary.BigEndian.AppendUint32(b, 0xffffffff) // no user data
}

func decodeAssignment(b []byte) ([]topicPartitions, error) {
	if len(b) == 0 {
		return nil, nil // a member the leader gave nothing
	}
	r := reader{b: b}
	v := r.int16()
	tps := r.topicPartitions()
	if r.err != nil || v < 0 {
		return nil, fmt.Errorf("%w (%d bytes)", errProtocol, len(b))
	}
	return tps, nil
}

// partitionsOf lists, sorted, the partitions of topic in tps.
func partitionsOf(tps []topicPartitions, topic string) []int {
	var out []int
	for _, tp := range tps {
		if tp.Topic == topic {
			for _, p := range tp.Partitions {
				out = append(out, int(p))
			}
		}
	}
	slices.Sort(out)
	return out
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendTopicPartitions(b []byte, tps []topicPartitions) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(tps)))
	for _, tp := range tps {
		b = appendString(b, tp.Topic)
		b = binary.BigEndian.AppendUint32(b, uint32(len(tp.Partitions)))
		for _, p := range tp.Partitions {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
		}
	}
	return b
}

// reader reads big-endian protocol fields; the first short read sets err
// and every later read returns zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errProtocol
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) int16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

// count reads an array length whose elements take at least min bytes
// each: -1 for a null array, an error for a length the bytes left cannot
// hold.
func (r *reader) count(min int) int {
	n := int(r.int32())
	if r.err != nil || n == -1 {
		return -1
	}
	if n < 0 || n > len(r.b)/min {
		r.err = errProtocol
		return -1
	}
	return n
}

func (r *reader) string() string {
	n := int(r.int16())
	if r.err != nil || n == -1 {
		return ""
	}
	return string(r.take(n))
}

// bytes reads nullable bytes (nil for null).
func (r *reader) bytes() []byte {
	n := int(r.int32())
	if r.err != nil || n == -1 {
		return nil
	}
	return r.take(n)
}

func (r *reader) topicPartitions() []topicPartitions {
	n := r.count(2 + 4)
	if n < 0 {
		return nil
	}
	out := make([]topicPartitions, 0, n)
	for range n {
		tp := topicPartitions{Topic: r.string()}
		if m := r.count(4); m > 0 {
			tp.Partitions = make([]int32, m)
			for i := range tp.Partitions {
				tp.Partitions[i] = r.int32()
			}
		}
		out = append(out, tp)
	}
	return out
}
