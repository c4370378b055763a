package docstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

// The register keeps each version of key at "<key>/<seq>-<writer>", where seq is
// a 20-digit, zero-padded number, so LIST order is version order.
const seqWidth = 20

func parseSeq(versionKey string) (int64, bool) {
	name := versionKey[strings.LastIndexByte(versionKey, '/')+1:]
	if len(name) < seqWidth+1 || name[seqWidth] != '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(name[:seqWidth], 10, 64)
	return n, err == nil
}

func (d *Store) registerVersions(ctx context.Context, key string) ([]objstore.Info, error) {
	var out []objstore.Info
	for info, err := range d.s.List(ctx, key+"/", &objstore.ListOptions{Delimiter: "/"}) {
		if err != nil {
			return nil, err
		}
		if _, ok := parseSeq(info.Key); ok && !info.IsPrefix {
			out = append(out, info)
		}
	}
	return out, nil
}

func (d *Store) registerRead(ctx context.Context, key string) (current, error) {
	for range 5 {
		vs, err := d.registerVersions(ctx, key)
		if err != nil {
			return current{}, err
		}
		if len(vs) == 0 {
			return current{env: envelope{Format: formatVersion}}, nil
		}
		newest := vs[len(vs)-1]
		data, info, err := d.s.GetBytes(ctx, newest.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // superseded and cleaned up between LIST and GET: list again
		}
		if err != nil {
			return current{}, err
		}
		env, err := decode(data)
		if err != nil {
			return current{}, fmt.Errorf("%s: %w", newest.Key, err)
		}
		seq, _ := parseSeq(newest.Key)
		return current{env: env, etag: info.ETag, exists: true, lm: info.LastModified, seq: seq}, nil
	}
	return current{}, fmt.Errorf("docstore: %q: its newest version kept disappearing; is RegisterGrace too short?", key)
}

// registerUpdate writes a new version (last writer wins) and cleans up.
func (d *Store) registerUpdate(ctx context.Context, key string, reqs []*request) {
	deliver := func(m Meta, err error) { deliver(reqs, m, err) }
	var lastErr error
	for attempt := 0; attempt < d.opts.MaxAttempts; attempt++ {
		c, err := d.registerRead(ctx, key)
		if err != nil {
			if permanent(err) {
				deliver(Meta{}, err)
				return
			}
			lastErr = err
			if d.retry.Wait(ctx, attempt) != nil {
				break
			}
			continue
		}
		next, raw, any := apply(key, c, reqs)
		if !any {
			deliver(c.meta(key), nil)
			return
		}
		env := d.next(c, next, raw)
		body, err := encode(&env)
		if err != nil {
			deliver(Meta{}, err)
			return
		}
		seq := max(c.seq+1, time.Now().UnixNano())
		vkey := fmt.Sprintf("%s/%0*d-%s", key, seqWidth, seq, d.opts.WriterID)
		info, err := d.registerPut(ctx, vkey, body)
		if err == nil {
			d.registerCleanup(ctx, key)
			deliver(Meta{Key: key, ETag: info.ETag, Rev: env.Rev, Exists: true, LastModified: info.LastModified}, nil)
			return
		}
		if permanent(err) || errors.Is(err, objstore.ErrAmbiguous) {
			deliver(Meta{}, err) // ambiguous: the version may land; a new one would apply the update twice
			return
		}
		lastErr = err
		if d.retry.Wait(ctx, attempt) != nil {
			break
		}
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	deliver(Meta{}, fmt.Errorf("docstore: %q: register write failed: %w", key, lastErr))
}

// registerPut writes one version. The version key is this update's alone,
// so after an ambiguous failure it sends the same key and body again instead
// of a new version: a first request that lands late writes the same bytes to
// the same key, and the update becomes one version whatever lands when. An
// error means the version may exist (ErrAmbiguous) or does not.
func (d *Store) registerPut(ctx context.Context, vkey string, body []byte) (objstore.Info, error) {
	var err error
	unknown := false // an earlier attempt may have written the version
	for attempt := range 8 {
		var info objstore.Info
		d.count(func(s *Stats) { s.Writes++ })
		info, err = d.s.PutBytes(ctx, vkey, body, &objstore.PutOptions{ContentType: "application/json"})
		if err == nil {
			return info, nil
		}
		if !errors.Is(err, objstore.ErrAmbiguous) {
			if unknown {
				// This attempt failed, but an earlier one may have landed: a new
				// version would apply the update twice.
				return objstore.Info{}, fmt.Errorf("docstore: %q: an earlier write of this version may have landed (%w); last error: %v", vkey, objstore.ErrAmbiguous, err)
			}
			return info, err
		}
		unknown = true
		if d.retry.Wait(ctx, attempt) != nil {
			break
		}
	}
	return objstore.Info{}, err
}

// registerCleanup deletes versions older than the newest by more than the
// grace period, judged by the store's Last-Modified times. Never the newest.
func (d *Store) registerCleanup(ctx context.Context, key string) {
	vs, err := d.registerVersions(ctx, key)
	if err != nil || len(vs) < 2 {
		return
	}
	newest := vs[len(vs)-1]
	for _, v := range vs[:len(vs)-1] {
		if newest.LastModified.Sub(v.LastModified) > d.opts.RegisterGrace {
			_ = d.s.Delete(ctx, v.Key, objstore.Condition{})
		}
	}
}
