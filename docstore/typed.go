package docstore

import (
	"context"
	"encoding/json"
	"fmt"
)

// Doc is a typed view of a Store for JSON documents of type T.
type Doc[T any] struct{ d *Store }

// Typed returns a view of d whose documents are JSON values of type T.
func Typed[T any](d *Store) Doc[T] { return Doc[T]{d} }

// Load reads and decodes the document at key.
func (c Doc[T]) Load(ctx context.Context, key string) (T, Meta, error) {
	var v T
	data, m, err := c.d.LoadBytes(ctx, key)
	if err != nil {
		return v, m, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, m, decodeError(key, v, err)
	}
	return v, m, nil
}

// Create writes v as a new document; objstore.ErrPreconditionFailed if it exists.
func (c Doc[T]) Create(ctx context.Context, key string, v T) (Meta, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Meta{}, err
	}
	return c.d.create(ctx, key, data, false)
}

// Update applies fn to the current value (the zero T, with m.Exists false, for
// a missing document) and commits the result. fn may run more than once.
func (c Doc[T]) Update(ctx context.Context, key string, fn func(v *T, m Meta) error) (T, Meta, error) {
	var out T
	data, m, err := c.d.update(ctx, key, false, func(cur []byte, m Meta) ([]byte, error) {
		var v T
		if m.Exists {
			if err := json.Unmarshal(cur, &v); err != nil {
				return nil, decodeError(key, v, err)
			}
		}
		if err := fn(&v, m); err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	if err != nil {
		return out, m, err
	}
	err = json.Unmarshal(data, &out)
	return out, m, err
}

// decodeError says that the document at key is not the JSON its reader
// expects, naming the Go type only when there is one to name (a reader of
// any value just needs JSON).
func decodeError(key string, v any, err error) error {
	want := "JSON"
	if v != nil {
		want = fmt.Sprintf("JSON for a %T", v)
	}
	return fmt.Errorf("docstore: %q does not hold %s (was it written by something other than cairn doc?): %w", key, want, err)
}
