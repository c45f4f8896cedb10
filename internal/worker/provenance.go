package worker

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strconv"

	"github.com/segmentio/kafka-go"
)

// Provenance: every record the worker writes carries, besides the src
// headers, a bloomgate-provenance header that binds it to the memory that
// wrote it. The recovery scan counts a record found in a written topic as
// "already written by this memory" only if that header verifies under the
// memory's secret key; anything else there (another producer's records,
// another group's, forged headers) is ignored and counted
// (docs/worker.md, "Provenance").
//
// The header value is ASCII, five fields separated by one space:
//
//	1 <memory id> <mac> <input topic> <group>
//
// 1 is the format version; the memory id is 16 hex digits derived from
// the key (it names the memory without revealing the key); the mac, 16
// bytes in base64url without padding, binds the group, input topic, src
// partition, src offset and the topic the record was written to under the
// memory's key: a partition key is derived once, HMAC-SHA256(key, group,
// input topic, partition) cut to an AES-128 key, and each record's mac is
// AES under it of one block holding the src offset and 8 bytes of
// SHA-256 of the written topic's name. AES is a pseudo-random
// permutation, and a PRF on fixed-length inputs is a MAC: forging one
// means predicting AES under an unknown key. One block costs ~15 ns with
// AES-NI where HMAC per record cost ~185 ns (BenchmarkProvenance). Group last: group IDs may hold
// spaces, topic names may not. Group and input topic are also in clear so
// that a report about another group's records in a scanned topic can name
// it; they are covered by the mac, so they cannot be swapped.
//
// The key comes from the Filter (ProvenanceKeyer: derived from the
// memory's secret hash seed, which the checkpoints keep). Without a key
// (a Filter that has none) the mac is computed under an empty key: the
// records still say where they come from, but anyone can forge them.

// HeaderProvenance names the provenance header of written records.
const HeaderProvenance = "bloomgate-provenance"

// ProvenanceKeyer is implemented by a Filter whose memory has a secret: the
// key that authenticates the records written while it is the partition's
// memory. It must be the same for every restore of the memory and differ
// between memories; it is never logged.
type ProvenanceKeyer interface {
	ProvenanceKey() []byte
}

// provenanceVersion is the first field of the header value.
const provenanceVersion = "1"

// provenanceMACLen is the length of the mac before encoding (128 bits).
const provenanceMACLen = 16

// provenance writes and verifies the provenance of one input partition's
// records under one memory's key. Not safe for concurrent use: each
// partition session has its own.
type provenance struct {
	group, topic string
	partition    int
	memID        string // 16 hex digits
	// block is AES-128 under the partition key (see the top of the file).
	block cipher.Block
	// topics caches the digests of the written topics' names.
	topics []topicDigest
	// prefix is "1 <memid> " and suffix " <topic> <group>": the parts of
	// the header value that do not change per record.
	prefix, suffix []byte
	in, sum        [aes.BlockSize]byte
}

type topicDigest struct {
	name   string
	digest [8]byte
}

func newProvenance(key []byte, group, topic string, partition int) *provenance {
	id := hmac.New(sha256.New, key)
	id.Write([]byte("bloomgate memory id v1"))
	memID := hex.EncodeToString(id.Sum(nil)[:8])

	pk := hmac.New(sha256.New, key)
	pk.Write([]byte("bloomgate provenance partition v1\x00"))
	writeField(pk, group)
	writeField(pk, topic)
	var pb [8]byte
	binary.BigEndian.PutUint64(pb[:], uint64(partition))
	pk.Write(pb[:])
	block, err := aes.NewCipher(pk.Sum(nil)[:16])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return &provenance{
		group: group, topic: topic, partition: partition, memID: memID,
		block:  block,
		prefix: []byte(provenanceVersion + " " + memID + " "),
		suffix: []byte(" " + topic + " " + group),
	}
}

// writeField writes s with its length, so that concatenations cannot
// collide.
func writeField(h hash.Hash, s string) {
	var l [binary.MaxVarintLen64]byte
	h.Write(l[:binary.PutUvarint(l[:], uint64(len(s)))])
	h.Write([]byte(s))
}

// tag computes the record mac of (offset, written topic) into pv.sum.
func (pv *provenance) tag(offset int64, written string) []byte {
	binary.BigEndian.PutUint64(pv.in[:8], uint64(offset))
	copy(pv.in[8:], pv.digest(written))
	pv.block.Encrypt(pv.sum[:], pv.in[:])
	return pv.sum[:provenanceMACLen]
}

// digest returns 8 bytes of SHA-256 of a written topic's name.
func (pv *provenance) digest(topic string) []byte {
	for i := range pv.topics {
		if pv.topics[i].name == topic {
			return pv.topics[i].digest[:]
		}
	}
	d := sha256.Sum256([]byte("bloomgate written topic\x00" + topic))
	td := topicDigest{name: topic}
	copy(td.digest[:], d[:8])
	if len(pv.topics) < 8 { // a worker writes to at most three
		pv.topics = append(pv.topics, td)
	}
	return td.digest[:]
}

// appendValue appends the header value of the record of offset written
// to topic written.
func (pv *provenance) appendValue(dst []byte, offset int64, written string) []byte {
	dst = append(dst, pv.prefix...)
	dst = base64.RawURLEncoding.AppendEncode(dst, pv.tag(offset, written))
	return append(dst, pv.suffix...)
}

// provenanceFields is a parsed header value.
type provenanceFields struct {
	memID, mac   []byte
	topic, group []byte
}

// parseProvenance splits a header value; ok is false if it is not one.
func parseProvenance(v []byte) (f provenanceFields, ok bool) {
	parts := bytes.SplitN(v, []byte(" "), 5)
	if len(parts) != 5 || string(parts[0]) != provenanceVersion {
		return f, false
	}
	return provenanceFields{memID: parts[1], mac: parts[2], topic: parts[3], group: parts[4]}, true
}

// Verdicts of the recovery scan on a record naming this input partition.
type provenanceVerdict uint8

const (
	provOurs           provenanceVerdict = iota // written by this memory
	provNone                                    // src headers without a provenance header
	provOtherGroup                              // another group or input topic
	provOtherMemory                             // this group, topic and partition, another memory
	provInvalid                                 // this memory's id, a mac that does not verify
	provOtherPartition                          // this memory's group and topic, another src partition (hash partitioning)
	provMalformed                               // a provenance header that does not parse
	provNoHeaders                               // no bloomgate headers at all
	provenanceVerdicts                          // count
)

// foreignReasons are the reason labels of bloomgate_recovery_foreign_records_total,
// by verdict ("" for verdicts that are not foreign).
var foreignReasons = [provenanceVerdicts]string{
	provNone:        "unauthenticated",
	provOtherGroup:  "other_group",
	provOtherMemory: "other_memory",
	provInvalid:     "invalid_mac",
	provMalformed:   "malformed",
	provNoHeaders:   "no_headers",
}

// ForeignReasons lists the reason labels of foreign records.
func ForeignReasons() []string {
	var out []string
	for _, r := range foreignReasons {
		if r != "" {
			out = append(out, r)
		}
	}
	return out
}

// verify judges the last provenance header value v (nil: none) of a record
// naming src partition p at src offset off, found in topic written.
func (pv *provenance) verify(v []byte, p int, off int64, written string) (provenanceVerdict, provenanceFields) {
	if v == nil {
		return provNone, provenanceFields{}
	}
	f, ok := parseProvenance(v)
	if !ok {
		return provMalformed, f
	}
	if string(f.group) != pv.group || string(f.topic) != pv.topic {
		return provOtherGroup, f
	}
	if p != pv.partition {
		return provOtherPartition, f
	}
	if string(f.memID) != pv.memID {
		return provOtherMemory, f
	}
	var got [provenanceMACLen]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], f.mac); err != nil || n != provenanceMACLen ||
		!hmac.Equal(got[:], pv.tag(off, written)) {
		return provInvalid, f
	}
	return provOurs, f
}

// lastHeader returns the value of the last header named key (nil: none).
// Written records carry the input record's headers first and the worker's
// after them, so the last one is the worker's.
func lastHeader(hs []kafka.Header, key string) ([]byte, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return hs[i].Value, true
		}
	}
	return nil, false
}

// srcOf reads the src headers of a written record: the last ones, which
// are the worker's (an input record's own, copied before them, may be
// anything).
func srcOf(hs []kafka.Header) (partition int, offset int64, ok bool) {
	pv, okP := lastHeader(hs, HeaderSrcPartition)
	ov, okO := lastHeader(hs, HeaderSrcOffset)
	if !okP || !okO {
		return 0, 0, false
	}
	p, err := strconv.Atoi(string(bytes.TrimSpace(pv)))
	if err != nil || p < 0 {
		return 0, 0, false
	}
	o, err := strconv.ParseInt(string(bytes.TrimSpace(ov)), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return p, o, true
}
