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
	"fmt"
	"hash"
	"math"
	"strconv"

	"github.com/segmentio/kafka-go"
)

// Provenance: every record the worker writes carries one header, named
// bloomgate, that says which input record it stands for and binds it to
// the memory that wrote it. The recovery scan counts a record found in a
// written topic as "already written by this memory" only if that header
// verifies under the memory's secret key; anything else there (another
// producer's records, another group's, forged headers) is ignored and
// counted (docs/worker.md, "Provenance").
//
// The header value is binary (format 2). Every record's names the input
// record it stands for:
//
//	byte     2, the format
//	uvarint  the src partition (the input partition)
//	uvarint  the src offset
//
// and the last record of each produced batch (a record written alone is
// the last of its own) carries the batch's seal after them:
//
//	uvarint  n, the records it covers: itself and the n-1 before it
//	4 bytes  the pipeline: SHA-256 of the group and the input topic, cut
//	4 bytes  the memory id: derived from the key, it names the memory
//	         without revealing the key
//	12 bytes the mac
//
// The mac is HMAC-SHA256, cut to 96 bits, under a key derived once per
// partition (HMAC-SHA256 of the memory's key, the group, the input topic
// and the partition), of the written topic's name digest, n and the n src
// offsets (as varints of their differences). A batch is appended to a partition's log whole, at consecutive
// offsets, so no other writer's record can sit inside one: the recovery
// scan counts the n records before a seal, and the seal's own, as this
// memory's when the seal verifies over their src offsets, and any record
// that no verified seal covers as foreign. Forging a seal means
// predicting HMAC under an unknown key (one guess in 2^96 per forged
// batch). One mac per batch keeps what does not compress off the other
// records: a mac per record, 12 random bytes, was 27.5 of the 112.7 MiB a
// zstd output took for 2.4 M records (docs/benchmarks-journal.md, "One header").
// Group and input topic are not in clear: the pipeline digest tells
// another pipeline's records from this one's, and the mac binds the names
// themselves.
//
// Older builds wrote format 1, three text headers (bloomgate-src-partition,
// bloomgate-src-offset and bloomgate-provenance "1 <memory id, 16 hex
// digits> <mac, 16 bytes base64url> <input topic> <group>", 135 bytes of
// names and values per record, the group and input topic in clear), and
// builds from before provenance only the two src headers. Both are still
// read (a rolling upgrade; docs/worker.md, "Provenance"): whichever of the
// worker's headers comes last on a record is the worker's, the input
// record's own (copied before them) may be anything, an earlier stage's
// included.
//
// Format 1's per-record mac is AES-128, under a per-partition key, of one
// block holding the src offset and 8 bytes of SHA-256 of the written
// topic's name (AES is a pseudo-random permutation, and a PRF on
// fixed-length inputs is a MAC); it is still verified.
//
// The key comes from the Filter (ProvenanceKeyer: derived from the
// memory's secret hash seed, which the checkpoints keep). Without a key
// (a Filter that has none) the mac is computed under an empty key: the
// records still say where they come from, but anyone can forge them.

// HeaderProvenance names the one header the worker adds to every record it
// writes (format 2).
const HeaderProvenance = "bloomgate"

// HeaderOriginPartition names the header the repartition hop adds to the
// records it writes (the input partition; with HeaderOriginOffset, the
// input offset). A record with it and none of the worker's headers is the
// hop's dead letter: the recovery scan of a dead-letter topic the hop and
// the dedup stage share skips it without counting it foreign.
const (
	HeaderOriginPartition = "bloomgate-origin-partition"
	HeaderOriginOffset    = "bloomgate-origin-offset"
)

// The headers of format 1 and of builds from before provenance, read
// during a rolling upgrade.
const (
	HeaderSrcPartition   = "bloomgate-src-partition"
	HeaderSrcOffset      = "bloomgate-src-offset"
	HeaderTextProvenance = "bloomgate-provenance"
)

// ProvenanceKeyer is implemented by a Filter whose memory has a secret: the
// key that authenticates the records written while it is the partition's
// memory. It must be the same for every restore of the memory and differ
// between memories; it is never logged.
type ProvenanceKeyer interface {
	ProvenanceKey() []byte
}

const (
	// provenanceFormat is the first byte of the header value.
	provenanceFormat = 2
	// provenanceMACLen is the length of the mac written (96 bits).
	provenanceMACLen = 12
	// textProvenanceVersion and textMACLen: format 1's first field and mac.
	textProvenanceVersion = "1"
	textMACLen            = 16
	// provenanceIDLen is the length of the pipeline digest and of the
	// memory id in the header.
	provenanceIDLen = 4
	// maxSealed bounds the records one seal covers (the writer cuts
	// batches there; the scan keeps no more unsealed records waiting).
	maxSealed = 1 << 16
	// sealLen is the length of a seal covering 1 record (uvarint n, ids,
	// mac), sealMaxLen of any: n takes up to 3 bytes.
	sealLen    = 1 + 2*provenanceIDLen + provenanceMACLen
	sealMaxLen = sealLen + 2
	// originMaxLen bounds a format 2 value: format, partition (a
	// non-negative int32), offset, seal.
	originMaxLen = 1 + binary.MaxVarintLen32 + binary.MaxVarintLen64 + sealMaxLen
)

// provenance writes and verifies the provenance of one input partition's
// records under one memory's key. Not safe for concurrent use: each
// partition session has its own.
type provenance struct {
	group, topic string
	partition    int
	memID        [8]byte // the first provenanceIDLen are written
	pipeline     [provenanceIDLen]byte
	// block is AES-128 under format 1's partition key, sealKey format
	// 2's HMAC key (see the top of the file).
	block   cipher.Block
	sealKey [sha256.Size]byte
	// topics caches the digests of the written topics' names.
	topics  []topicDigest
	in, sum [aes.BlockSize]byte
}

type topicDigest struct {
	name   string
	digest [8]byte
}

func newProvenance(key []byte, group, topic string, partition int) *provenance {
	pv := &provenance{group: group, topic: topic, partition: partition}
	id := hmac.New(sha256.New, key)
	id.Write([]byte("bloomgate memory id v1"))
	copy(pv.memID[:], id.Sum(nil))

	pl := sha256.New()
	pl.Write([]byte("bloomgate pipeline v2\x00"))
	writeField(pl, group)
	writeField(pl, topic)
	copy(pv.pipeline[:], pl.Sum(nil))

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
	pv.block = block

	sk := hmac.New(sha256.New, key)
	sk.Write([]byte("bloomgate provenance seal v2\x00"))
	writeField(sk, group)
	writeField(sk, topic)
	sk.Write(pb[:])
	copy(pv.sealKey[:], sk.Sum(nil))
	return pv
}

// writeField writes s with its length, so that concatenations cannot
// collide.
func writeField(h hash.Hash, s string) {
	var l [binary.MaxVarintLen64]byte
	h.Write(l[:binary.PutUvarint(l[:], uint64(len(s)))])
	h.Write([]byte(s))
}

// tag computes format 1's record mac of (offset, written topic) into
// pv.sum.
func (pv *provenance) tag(offset int64, written string) []byte {
	binary.BigEndian.PutUint64(pv.in[:8], uint64(offset))
	copy(pv.in[8:], pv.digest(written))
	pv.block.Encrypt(pv.sum[:], pv.in[:])
	return pv.sum[:]
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

// appendOrigin appends the format 2 value of the record of input
// partition p, offset off, without a seal.
func appendOrigin(dst []byte, p int, off int64) []byte {
	dst = append(dst, provenanceFormat)
	dst = binary.AppendUvarint(dst, uint64(p))
	return binary.AppendUvarint(dst, uint64(off))
}

// appendSeal appends the seal of n records written to topic written, the
// src offset of the i-th being at(i); the last of them carries it. Safe
// for concurrent use (a write's runs seal their batches at once).
func (pv *provenance) appendSeal(dst []byte, written string, n int, at func(int) int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = append(dst, pv.pipeline[:]...)
	dst = append(dst, pv.memID[:provenanceIDLen]...)
	var sum [sha256.Size]byte
	return append(dst, pv.sealMAC(&sum, written, n, at)[:provenanceMACLen]...)
}

// sealMAC computes the mac of a seal into sum.
func (pv *provenance) sealMAC(sum *[sha256.Size]byte, written string, n int, at func(int) int64) []byte {
	h := hmac.New(sha256.New, pv.sealKey[:])
	d := sha256.Sum256([]byte("bloomgate written topic\x00" + written))
	// n, then the offsets as the varints of their differences (the
	// first from 0): prefix-free, and ~1 byte per record to hash.
	var buf [512]byte
	b := append(buf[:0], d[:8]...)
	b = binary.AppendUvarint(b, uint64(n))
	var prev int64
	for i := range n {
		if len(b)+binary.MaxVarintLen64 > len(buf) {
			h.Write(b)
			b = buf[:0]
		}
		off := at(i)
		b = binary.AppendVarint(b, off-prev)
		prev = off
	}
	h.Write(b)
	return h.Sum(sum[:0])
}

// appendTextValue appends the bloomgate-provenance value of format 1, as
// builds before format 2 wrote it (with the two src headers): kept for the
// tests that play such a build during a rolling upgrade.
func (pv *provenance) appendTextValue(dst []byte, offset int64, written string) []byte {
	dst = append(dst, textProvenanceVersion+" "...)
	dst = hex.AppendEncode(dst, pv.memID[:])
	dst = append(dst, ' ')
	dst = base64.RawURLEncoding.AppendEncode(dst, pv.tag(offset, written)[:textMACLen])
	dst = append(dst, ' ')
	dst = append(dst, pv.topic...)
	dst = append(dst, ' ')
	return append(dst, pv.group...)
}

// origin is what a written record's worker headers say: the input record
// it stands for and its provenance.
type origin struct {
	format    int // 0: no worker headers; 1: text (src headers, with or without bloomgate-provenance); 2: binary
	partition int
	offset    int64
	srcOK     bool // partition and offset were read
	// text is format 1's bloomgate-provenance value (nil: none).
	text []byte
	// Format 2's seal (sealed; a malformed value: srcOK false).
	sealed               bool
	n                    int
	pipeline, memID, mac []byte
}

// originOf reads the worker's headers of a written record: those of
// format 2 or of format 1, whichever comes last (the worker's own follow
// the input record's).
func originOf(hs []kafka.Header) origin {
	last2, last1 := -1, -1
	for i := len(hs) - 1; i >= 0 && (last2 < 0 || last1 < 0); i-- {
		switch hs[i].Key {
		case HeaderProvenance:
			last2 = max(last2, i)
		case HeaderSrcPartition, HeaderSrcOffset, HeaderTextProvenance:
			last1 = max(last1, i)
		}
	}
	switch {
	case last2 > last1:
		o := origin{format: 2}
		o.parse(hs[last2].Value)
		return o
	case last1 >= 0:
		o := origin{format: 1}
		o.partition, o.offset, o.srcOK = srcOf(hs)
		o.text, _ = lastHeader(hs, HeaderTextProvenance)
		return o
	}
	return origin{}
}

// parse reads a format 2 value into o; on any error the provenance fields
// stay nil and srcOK false.
func (o *origin) parse(v []byte) {
	if len(v) < 1 || v[0] != provenanceFormat {
		return
	}
	rest := v[1:]
	p, n := binary.Uvarint(rest)
	if n <= 0 || p > math.MaxInt32 {
		return
	}
	rest = rest[n:]
	off, n := binary.Uvarint(rest)
	if n <= 0 || off > math.MaxInt64 {
		return
	}
	rest = rest[n:]
	if len(rest) == 0 {
		o.partition, o.offset, o.srcOK = int(p), int64(off), true
		return
	}
	sealed, n := binary.Uvarint(rest)
	if n <= 0 || sealed < 1 || sealed > maxSealed || len(rest[n:]) != 2*provenanceIDLen+provenanceMACLen {
		return
	}
	rest = rest[n:]
	o.partition, o.offset, o.srcOK = int(p), int64(off), true
	o.sealed, o.n = true, int(sealed)
	o.pipeline, o.memID, o.mac = rest[:provenanceIDLen], rest[provenanceIDLen:2*provenanceIDLen], rest[2*provenanceIDLen:]
}

// SourceOf returns the input partition and offset that a record the worker
// wrote stands for, from its worker headers (either format), for tools and
// tests that read the written topics.
func SourceOf(hs []kafka.Header) (partition int, offset int64, ok bool) {
	o := originOf(hs)
	return o.partition, o.offset, o.srcOK
}

// textFields is a parsed format 1 provenance value.
type textFields struct {
	memID, mac   []byte
	topic, group []byte
}

// parseText splits a format 1 value; ok is false if it is not one.
func parseText(v []byte) (f textFields, ok bool) {
	parts := bytes.SplitN(v, []byte(" "), 5)
	if len(parts) != 5 || string(parts[0]) != textProvenanceVersion {
		return f, false
	}
	return textFields{memID: parts[1], mac: parts[2], topic: parts[3], group: parts[4]}, true
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
	provHop                                     // the repartition hop's dead letter (its own headers only): its metrics count it
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

// judge says whose a record of format 0 or 1 found in topic written is
// (format 2 records are judged by their batch's seal: verifySeal). For
// records of another pipeline, who names it as far as the headers tell.
func (pv *provenance) judge(o origin, written string) (v provenanceVerdict, who string) {
	if o.format == 0 {
		return provNoHeaders, ""
	}
	v, who = pv.verifyText(o, written)
	if !o.srcOK && v == provOurs {
		v = provMalformed // a verified provenance with garbled src headers
	}
	return v, who
}

// verifySeal judges the seal o over the n records ending with it, the
// src offset of the i-th being at(i).
func (pv *provenance) verifySeal(o origin, written string, at func(int) int64) (provenanceVerdict, string) {
	if !bytes.Equal(o.pipeline, pv.pipeline[:]) {
		return provOtherGroup, fmt.Sprintf("pipeline %x (a digest of its group and input topic)", o.pipeline)
	}
	if o.partition != pv.partition {
		return provOtherPartition, ""
	}
	if !bytes.Equal(o.memID, pv.memID[:provenanceIDLen]) {
		return provOtherMemory, ""
	}
	var sum [sha256.Size]byte
	if !hmac.Equal(o.mac, pv.sealMAC(&sum, written, o.n, at)[:provenanceMACLen]) {
		return provInvalid, ""
	}
	return provOurs, ""
}

// verifyText judges a format 1 origin.
func (pv *provenance) verifyText(o origin, written string) (provenanceVerdict, string) {
	if o.text == nil {
		return provNone, ""
	}
	f, ok := parseText(o.text)
	if !ok {
		return provMalformed, ""
	}
	if string(f.group) != pv.group || string(f.topic) != pv.topic {
		return provOtherGroup, fmt.Sprintf("group %q (input %q)", f.group, f.topic)
	}
	if o.partition != pv.partition {
		return provOtherPartition, ""
	}
	if string(f.memID) != hex.EncodeToString(pv.memID[:]) {
		return provOtherMemory, ""
	}
	var got [textMACLen]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], f.mac); err != nil || n != textMACLen ||
		!hmac.Equal(got[:], pv.tag(o.offset, written)[:textMACLen]) {
		return provInvalid, ""
	}
	return provOurs, ""
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
