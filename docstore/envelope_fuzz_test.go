package docstore

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecode: any stored bytes decode without panicking, and whatever decodes
// survives a write: encoding the envelope and decoding it again gives the same
// revision, nonce and payload (JSON compared compacted, bytes exactly).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"cairn_doc":1,"rev":3,"nonce":"n3","recent":[{"r":2,"n":"n2"}],"value":{"a":1}}`,
		`{"cairn_doc":1,"rev":1,"nonce":"x","raw":"AAEC","is_raw":true}`,
		`{"cairn_doc":2,"rev":1}`, `{"cairn_doc":`, `{"plain":"json"}`, ` [1,2] `, "not json \x00\xff", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decode(data)
		if err != nil {
			return
		}
		enc, err := encode(&e)
		if err != nil {
			t.Fatalf("a decoded envelope does not encode: %v", err)
		}
		back, err := decode(enc)
		if err != nil {
			t.Fatalf("an encoded envelope does not decode: %v\n%s", err, enc)
		}
		if back.Rev != e.Rev || back.Nonce != e.Nonce || back.IsRaw != e.IsRaw || len(back.Recent) != len(e.Recent) {
			t.Fatalf("round trip changed the envelope: %+v -> %+v", e, back)
		}
		if e.IsRaw {
			if !bytes.Equal(back.Raw, e.Raw) {
				t.Fatalf("raw payload changed: %q -> %q", e.Raw, back.Raw)
			}
			return
		}
		var a, b bytes.Buffer
		if err := json.Compact(&a, e.Value); err != nil && len(e.Value) > 0 {
			t.Fatalf("decoded JSON value is not JSON: %q", e.Value)
		}
		_ = json.Compact(&b, back.Value)
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("JSON payload changed: %s -> %s", a.Bytes(), b.Bytes())
		}
	})
}
