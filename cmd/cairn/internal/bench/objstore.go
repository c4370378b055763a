package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

// ObjstoreOptions configures Objstore. Zero fields take the defaults.
type ObjstoreOptions struct {
	// Ops is how many operations each variant runs (default 400).
	Ops int
	// Size is the object size in bytes (default 4096).
	Size int
}

// Objstore measures, alternating in rounds on s, plain PUTs (the baseline)
// against write-once PUTs (If-None-Match: *) of fresh keys and
// compare-and-swap PUTs (If-Match) of one key. Scratch keys go under
// cairn-bench/ and are deleted after.
func Objstore(ctx context.Context, s *objstore.Store, opts ObjstoreOptions) ([]Result, error) {
	ops, size := opts.Ops, opts.Size
	if ops <= 0 {
		ops = 400
	}
	if size <= 0 {
		size = 4096
	}
	caps, err := s.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	if !caps.ConditionalWrites() {
		return nil, fmt.Errorf("%s does not enforce conditional writes (see `cairn probe`); nothing to compare", s)
	}
	body := bytes.Repeat([]byte("c"), size)
	prefix := fmt.Sprintf("cairn-bench/%d/", time.Now().UnixNano())
	defer func() {
		for info, err := range s.List(context.WithoutCancel(ctx), prefix, nil) {
			if err != nil {
				return
			}
			_ = s.Delete(context.WithoutCancel(ctx), info.Key, objstore.Condition{})
		}
	}()
	cas, err := s.PutBytes(ctx, prefix+"cas", body, nil)
	if err != nil {
		return nil, err
	}
	etag := cas.ETag
	var plain, absent, match Latencies
	const rounds = 10
	per := max(1, ops/rounds)
	timed := func(l *Latencies, f func() error) error {
		t0 := time.Now()
		if err := f(); err != nil {
			return err
		}
		*l = append(*l, time.Since(t0))
		return nil
	}
	for r := range rounds {
		for i := range per {
			k := fmt.Sprintf("%sobj/%d-%d", prefix, r, i)
			if err := timed(&plain, func() error { _, err := s.PutBytes(ctx, k+"-plain", body, nil); return err }); err != nil {
				return nil, err
			}
			if err := timed(&absent, func() error {
				_, err := s.PutBytes(ctx, k+"-once", body, &objstore.PutOptions{If: objstore.IfAbsent()})
				return err
			}); err != nil {
				return nil, err
			}
			body[0] = byte('a' + i%26) // change content so the ETag changes
			if err := timed(&match, func() error {
				info, err := s.PutBytes(ctx, prefix+"cas", body, &objstore.PutOptions{If: objstore.IfMatch(etag)})
				etag = info.ETag
				return err
			}); err != nil {
				return nil, err
			}
		}
	}
	mk := func(name string, l Latencies, desc string) Result {
		r := NewResult(name, "puts/s", plain.PerSecond(), l.PerSecond())
		r.BaselineDesc, r.CairnDesc = "plain PUT", desc
		r.BaselineP99, r.CairnP99 = plain.Percentile(99), l.Percentile(99)
		r.Note = fmt.Sprintf("%s, %d ops each, %d-byte objects, sequential", s, len(l), size)
		return r
	}
	return []Result{
		mk("objstore/put-if-absent", absent, "PUT If-None-Match: *"),
		mk("objstore/put-if-match", match, "PUT If-Match (CAS)"),
	}, nil
}
