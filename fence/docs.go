package fence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
)

// DocField is the JSON field of a fenced document that holds its token.
const DocField = "cairn_fence"

// Fenced is how a fenced document's value is stored:
// {"cairn_fence": N, "value": …}. Readers that do not use this package find
// the caller's value under "value".
type Fenced[T any] struct {
	Fence int64 `json:"cairn_fence"`
	Value T     `json:"value"`
}

// DocMeta describes a fenced document as read.
type DocMeta struct {
	docstore.Meta
	// Token is the highest token the document has recorded; -1 for a missing
	// document or one written without fencing.
	Token int64 `json:"token"`
}

// split decodes a stored value: the fenced shape, or a plain value that has
// recorded no token. A top-level DocField that is not a non-negative integer
// (null, -1, a string: no writer of this package stores those) is an error,
// never read as a mark or as no mark.
func split(cur []byte) (value json.RawMessage, token int64, err error) {
	trimmed := bytes.TrimSpace(cur)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &obj); err != nil {
			return nil, -1, err
		}
		if raw, ok := obj[DocField]; ok {
			if err := json.Unmarshal(raw, &token); err != nil || token < 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
				return nil, -1, fmt.Errorf("its %q field is %s, not a fencing token (a non-negative integer): it was not written by package fence; rename the field, or rewrite the document", DocField, truncate(raw, 40))
			}
			return obj["value"], token, nil
		}
	}
	return cur, -1, nil
}

func truncate(raw []byte, n int) string {
	if len(raw) > n {
		return string(raw[:n]) + "…"
	}
	return string(raw)
}

// CheckValue refuses (ErrInvalidArgument) a document value that would be
// stored without a mark although its top level holds DocField, whatever
// that field holds (a number, null, a string): it would read as a fenced
// document's wrapper, forging a mark or hiding the value's other fields. It
// returns nil for values that are not JSON objects. Every write of this
// package that stores a value without a mark checks it; a writer that
// stores documents by other means (docstore directly, `cairn doc create`)
// should too.
func CheckValue(key string, value []byte) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(value, &top) != nil {
		return nil // not an object
	}
	if _, ok := top[DocField]; ok {
		return fmt.Errorf("fence: document %q: the top-level field %q is reserved for the fencing token (a value holding it would read as a fenced document's wrapper); nothing was written: rename the field, or write the document with a token: %w", key, DocField, ErrInvalidArgument)
	}
	return nil
}
func decodeValue[T any](key string, raw json.RawMessage, v *T) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		want := "JSON"
		if any(*v) != nil {
			want = fmt.Sprintf("JSON for a %T", *v)
		}
		return fmt.Errorf("fence: document %q does not hold %s: %w", key, want, err)
	}
	return nil
}

// encode is how a value is stored: wrapped with its mark, or bare when the
// document has none (CheckValue).
func encode[T any](key string, v T, mark int64) ([]byte, error) {
	if mark >= 0 {
		return json.Marshal(Fenced[T]{Fence: mark, Value: v})
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if err := CheckValue(key, data); err != nil {
		return nil, err
	}
	return data, nil
}

// Unwrap splits a document's stored value (as docstore's LoadBytes returns
// it) into the caller's value and the mark it records: the "value" of a
// fenced document's wrapper and its token, or the stored bytes whole (JSON or
// not) and -1 when there is no wrapper. A top-level DocField that is not a
// token is an error. Load is LoadBytes, Unwrap and a JSON decode.
func Unwrap(stored []byte) (value []byte, token int64, err error) {
	raw, tok, err := split(stored)
	if err != nil {
		return nil, -1, fmt.Errorf("fence: %w", err)
	}
	return raw, tok, nil
}

// Load reads a fenced document's value and the token it has recorded. A
// document written without fencing is read whole as the value, with Token -1.
func Load[T any](ctx context.Context, d *docstore.Store, key string) (T, DocMeta, error) {
	var v T
	data, m, err := d.LoadBytes(ctx, key)
	if err != nil {
		return v, DocMeta{Meta: m, Token: -1}, err
	}
	raw, tok, err := split(data)
	if err != nil {
		return v, DocMeta{Meta: m, Token: -1}, fmt.Errorf("fence: document %q: %w", key, err)
	}
	return v, DocMeta{Meta: m, Token: tok}, decodeValue(key, raw, &v)
}

// Update applies fn to the document's value (the zero T, with m.Exists false,
// for a missing document) and commits the result with the token recorded, if
// token is at least the highest token the document has recorded; a lower
// token gets a *StaleError (ErrStale) and changes nothing. The judgement is
// made on the version the docstore package's compare-and-swap replaces, so a
// higher token's update can never be overwritten by a lower one. fn may run
// more than once; an error from fn aborts the update and is returned.
//
// A document written without fencing is taken as the value and wrapped on
// the first fenced update. Stores that do not enforce conditional writes are
// refused with objstore.ErrNotSupported (the docstore register fallback cannot
// compare and swap).
func Update[T any](ctx context.Context, d *docstore.Store, key string, token int64, fn func(v *T, m DocMeta) error) (T, DocMeta, error) {
	var out T
	if token < 0 {
		return out, DocMeta{Token: -1}, fmt.Errorf("fence: token %d for %q is negative; pass the token your lock handed out: %w", token, key, ErrInvalidArgument)
	}
	caps, err := d.Objects().Capabilities(ctx)
	if err != nil {
		return out, DocMeta{Token: -1}, fmt.Errorf("fence: cannot tell whether %s enforces conditional writes, so nothing was written: %w", d.Objects(), err)
	}
	if !caps.ConditionalWrites() {
		return out, DocMeta{Token: -1}, fmt.Errorf("fence: %s does not enforce conditional PUTs, so a stale writer could not be refused; nothing was written (run `cairn probe` to see what it enforces): %w", d.Objects(), objstore.ErrNotSupported)
	}
	data, m, err := updateJSON(ctx, d, key, func(cur []byte, m docstore.Meta, objMark int64) ([]byte, error) {
		var v T
		have := int64(-1)
		if m.Exists {
			raw, tok, err := split(cur)
			if err != nil {
				return nil, fmt.Errorf("fence: document %q: %w", key, err)
			}
			tok = max(tok, objMark)
			if token < tok {
				return nil, &StaleError{Key: key, Token: token, Highest: tok}
			}
			have = tok
			if err := decodeValue(key, raw, &v); err != nil {
				return nil, err
			}
		}
		if err := fn(&v, DocMeta{Meta: m, Token: have}); err != nil {
			return nil, err
		}
		return json.Marshal(Fenced[T]{Fence: token, Value: v})
	})
	if err != nil {
		return out, DocMeta{Meta: m, Token: -1}, err
	}
	var f Fenced[T]
	if err := json.Unmarshal(data, &f); err != nil {
		return out, DocMeta{Meta: m, Token: -1}, fmt.Errorf("fence: document %q: %w", key, err)
	}
	return f.Value, DocMeta{Meta: m, Token: f.Fence}, nil
}

// UpdateKeepingMark applies fn to the document's value (the zero T, with
// m.Exists false, for a missing document) and commits the result without a
// token: a fenced document keeps its mark (so a holder whose token is below
// it is still refused afterwards) and fn sees and changes the value, never the
// wrapper; a document without a mark stays without one. m.Token is the mark
// (-1: none), so fn may refuse a fenced document by returning a *FencedError.
// The docstore package's compare-and-swap makes the read, fn and the write
// one step: a fenced update that lands in between is redriven on, never
// overwritten. fn may run more than once; an error from fn aborts the update
// and is returned.
//
// It is for writers that hold no lock; it refuses no one, so it can overwrite
// a current holder's value. A value without a mark may not hold DocField at
// its top level (ErrInvalidArgument): it would read as a wrapper.
func UpdateKeepingMark[T any](ctx context.Context, d *docstore.Store, key string, fn func(v *T, m DocMeta) error) (T, DocMeta, error) {
	var out T
	data, m, err := updateJSON(ctx, d, key, func(cur []byte, m docstore.Meta, objMark int64) ([]byte, error) {
		var v T
		mark := int64(-1)
		if m.Exists {
			raw, tok, err := split(cur)
			if err != nil {
				return nil, fmt.Errorf("fence: document %q: %w", key, err)
			}
			mark = max(tok, objMark)
			if err := decodeValue(key, raw, &v); err != nil {
				return nil, err
			}
		}
		if err := fn(&v, DocMeta{Meta: m, Token: mark}); err != nil {
			return nil, err
		}
		return encode(key, v, mark)
	})
	if err != nil {
		return out, DocMeta{Meta: m, Token: -1}, err
	}
	raw, tok, err := split(data)
	if err != nil {
		return out, DocMeta{Meta: m, Token: -1}, fmt.Errorf("fence: document %q: %w", key, err)
	}
	return out, DocMeta{Meta: m, Token: tok}, decodeValue(key, raw, &out)
}

// updateJSON is d.UpdateJSON whose fn also gets the mark the object carries
// in its metadata (-1: none): an object written by Put or PutKeepingMark
// keeps its mark there, not in its body, and a document written over it must
// be judged by that mark and carry it on. The mark is read by a HEAD before
// the update; fn runs on the version that HEAD saw, or on a document docstore
// wrote since (whose metadata holds no mark); any other object landing in
// between makes it read again. On a store that does not enforce
// conditional writes no object carries a mark (Put refuses to write there),
// and nothing is read first.
func updateJSON(ctx context.Context, d *docstore.Store, key string, fn func(cur []byte, m docstore.Meta, objMark int64) ([]byte, error)) ([]byte, docstore.Meta, error) {
	if caps, err := d.Objects().Capabilities(ctx); err != nil || !caps.ConditionalWrites() {
		return d.UpdateJSON(ctx, key, func(cur []byte, m docstore.Meta) ([]byte, error) { return fn(cur, m, -1) })
	}
	for attempt := 0; ; attempt++ {
		info, err := d.Objects().Head(ctx, key)
		objMark, etag := int64(-1), ""
		switch {
		case err == nil:
			objMark, _ = TokenOf(info)
			etag = info.ETag
		case errors.Is(err, objstore.ErrNotFound):
		case permanent(err) || attempt >= 20:
			return nil, docstore.Meta{}, fmt.Errorf("fence: document %q: reading the mark its object may carry: %w", key, err)
		default:
			if err := retryWait.Wait(ctx, attempt); err != nil {
				return nil, docstore.Meta{}, err
			}
			continue
		}
		data, m, err := d.UpdateJSON(ctx, key, func(cur []byte, m docstore.Meta) ([]byte, error) {
			switch {
			case !m.Exists:
				return fn(cur, m, -1)
			case m.ETag == etag:
				return fn(cur, m, objMark)
			case m.Rev > 0:
				// Written by docstore since the HEAD (a document: revision 1
				// on), so no mark in its metadata: docstore's own redrive
				// under contention needs no new HEAD.
				return fn(cur, m, -1)
			}
			return nil, errChanged // a plain object the HEAD did not see
		})
		if errors.Is(err, errChanged) && attempt < 20 {
			if err := retryWait.Wait(ctx, attempt); err != nil {
				return nil, m, err
			}
			continue
		}
		return data, m, err
	}
}
