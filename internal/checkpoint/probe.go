package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ErrCreateOnlyIgnored: the store let a create-only write replace an
// existing object (it ignores If-None-Match: *). Two writers can then both
// write the same manifest sequence and fencing a stale owner cannot work.
var ErrCreateOnlyIgnored = errors.New("checkpoint store ignores create-only writes: fencing cannot work")

// probeDir holds the objects of VerifyCreateOnly. Its keys have two path
// elements, partition objects five (<group>/<topic>/<partition>/manifests|gens/<name>),
// so no group or topic name can make them meet: Restore and retention list
// inside one partition's directory, Inspect counts only five-element keys.
const probeDir = "_probe"

// VerifyCreateOnly checks that the store honours create-only writes, on which
// fencing rests: it creates a probe object under _probe/ create-only, creates
// it a second time and expects "already exists", reads it back expecting the
// first content, and deletes it. A store that accepts the second create
// yields an error wrapping ErrCreateOnlyIgnored; other failures name the step
// that failed (creating, re-creating, reading back) with the store's error
// (ErrUnavailable after retries, access denied, ...). The probe costs four
// small requests; ctx bounds it.
//
// A failed delete is logged, not returned: the check itself passed, and a
// leftover probe object is ignored by Restore, retention and Inspect.
func (s *Store) VerifyCreateOnly(ctx context.Context) error {
	start := time.Now()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := probeDir + "/create-only-" + hex.EncodeToString(rnd[:]) + ".json"
	body := func(attempt int) []byte {
		return fmt.Appendf(nil, `{"probe":"create-only","attempt":%d,"at":%q,"nonce":%q}`+"\n",
			attempt, s.opts.now().UTC().Format(time.RFC3339Nano), hex.EncodeToString(rnd[:]))
	}
	fail := func(step string, err error) error {
		return fmt.Errorf("create-only check of %s: %s probe object %s: %w", s.url, step, key, err)
	}

	first := body(1)
	_, err := s.bkt.Put(ctx, key, bytes.NewReader(first), true)
	if errors.Is(err, errExists) {
		// A retried attempt found its own earlier, answered-too-late write
		// (the name is random): equal bytes say so.
		existing, rerr := s.readSmall(ctx, key)
		if rerr != nil {
			return fail("creating", fmt.Errorf("it exists and reading it back failed: %w", rerr))
		}
		if !bytes.Equal(existing, first) {
			return fail("creating", fmt.Errorf("a fresh random name already holds other content: %w", err))
		}
		err = nil
	}
	if err != nil {
		return fail("creating", err)
	}

	_, err = s.bkt.Put(ctx, key, bytes.NewReader(body(2)), true)
	switch {
	case err == nil:
		s.deleteProbe(ctx, key)
		return fmt.Errorf("%w: %s accepted a second create-only write of probe object %s (If-None-Match: * on S3) instead of answering \"already exists\"",
			ErrCreateOnlyIgnored, s.url, key)
	case !errors.Is(err, errExists):
		s.deleteProbe(ctx, key)
		return fail("creating (second time, expecting \"already exists\")", err)
	}

	existing, err := s.readSmall(ctx, key)
	if err != nil {
		s.deleteProbe(ctx, key)
		return fail("reading back", err)
	}
	if !bytes.Equal(existing, first) {
		s.deleteProbe(ctx, key)
		return fmt.Errorf("%w: %s refused a second create-only write of probe object %s but replaced its content anyway",
			ErrCreateOnlyIgnored, s.url, key)
	}
	s.deleteProbe(ctx, key)
	s.log.Info("checkpoint store honours create-only writes", "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// deleteProbe removes the probe object; a failure only leaves a small object
// that nothing reads.
func (s *Store) deleteProbe(ctx context.Context, key string) {
	if ctx.Err() != nil {
		return // the check gave up; its error says why
	}
	if err := s.delete(ctx, key); err != nil {
		s.log.Warn("create-only check: deleting probe object failed; it is harmless (Restore, retention and inspect ignore "+probeDir+"/) and may be deleted by hand",
			"key", key, "err", err)
	}
}
