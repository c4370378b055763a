package docstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

const formatVersion = 1

// stamp identifies one committed write.
type stamp struct {
	Rev   int64  `json:"r"`
	Nonce string `json:"n"`
}

// envelope is the stored form of a document: the caller's value, a
// revision that grows by one per write, a fresh writer nonce, and the (rev,
// nonce) of the last HistoryLen writes.
//
// The nonce must be in the body: S3's If-Match compares ETags, which are the
// MD5 of the content only, so a nonce in user metadata would leave two writes
// of the same bytes with the same ETag (ABA: a stale compare-and-swap would
// succeed). In the body it makes every write's ETag unique. The history
// answers the other hard question: what became of a write whose outcome the
// client did not learn (see inflight).
type envelope struct {
	Format int             `json:"cairn_doc"`
	Rev    int64           `json:"rev"`
	Nonce  string          `json:"nonce"`
	Recent []stamp         `json:"recent,omitempty"` // earlier writes, newest first
	Value  json.RawMessage `json:"value,omitempty"`  // JSON documents
	Raw    []byte          `json:"raw,omitempty"`    // byte documents (base64)
	IsRaw  bool            `json:"is_raw,omitempty"`
}

// payload returns the caller's bytes.
func (e *envelope) payload() []byte {
	if e.IsRaw {
		return e.Raw
	}
	return e.Value
}

// has reports whether the write with nonce is this one or in the history, and
// whether the history is long enough to tell for a write at rev.
func (e *envelope) has(nonce string, rev int64) (found, decisive bool) {
	if e.Nonce == nonce {
		return true, true
	}
	oldest := e.Rev
	for _, s := range e.Recent {
		if s.Nonce == nonce {
			return true, true
		}
		oldest = min(oldest, s.Rev)
	}
	// Revisions grow by one per write: if ours (rev) had committed, it is either
	// in the window [oldest, e.Rev] or the document has not reached rev yet.
	return false, e.Rev < rev || oldest <= rev
}

func decode(data []byte) (envelope, error) {
	var e envelope
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' && bytes.Contains(trimmed, []byte(`"cairn_doc"`)) {
		if err := json.Unmarshal(trimmed, &e); err != nil {
			return e, fmt.Errorf("docstore: the object looks like a cairn document but does not parse: %w", err)
		}
		if e.Format != formatVersion {
			return e, fmt.Errorf("docstore: document format %d is not supported by this cairn (want %d); upgrade cairn", e.Format, formatVersion)
		}
		return e, nil
	}
	// A plain object written by another tool: revision 0, no history.
	if json.Valid(trimmed) {
		return envelope{Format: formatVersion, Value: json.RawMessage(trimmed)}, nil
	}
	return envelope{Format: formatVersion, Raw: data, IsRaw: true}, nil
}

// encode is the stored form of e. A JSON value is spliced in as it is, after
// one validity scan, rather than through json.RawMessage (which compacts it
// byte by byte: most of the cost of writing a large document). The value
// comes last, where the encoder would put it (raw documents have none), so
// the bytes are the encoder's for a compact value.
func encode(e *envelope) ([]byte, error) {
	value := e.Value
	if len(value) > 0 && !json.Valid(value) {
		return nil, errors.New("docstore: the value to write is not valid JSON")
	}
	rest := *e
	rest.Value = nil
	var buf bytes.Buffer
	buf.Grow(len(value) + 256)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&rest); err != nil {
		return nil, err
	}
	if len(value) == 0 {
		return buf.Bytes(), nil
	}
	out := buf.Bytes()
	out = out[:len(out)-2] // "}\n"
	out = append(out, `,"value":`...)
	out = append(out, value...)
	return append(out, '}', '\n'), nil
}
