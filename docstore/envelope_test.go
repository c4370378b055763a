package docstore

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// encodeWithEncoder is how envelopes were encoded before encode spliced the
// value in: the reference encode must match byte for byte.
func encodeWithEncoder(e *envelope) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func TestEncodeMatchesTheEncoder(t *testing.T) {
	values := []string{
		`{"a":1}`, `[]`, `"s"`, `0`, `null`, `true`,
		`{"k":"<b>&amp;</b> \u2028 \u2029 ünï 日本 \"q\" \\ \u0000","n":[1,2.5e3,-0],"o":{}}`,
		`{"rows":{"b/x%2Fy/../z":{"s":"pending"}}}`,
	}
	for _, v := range values {
		for _, env := range []envelope{
			{Format: formatVersion, Rev: 1, Nonce: "n1", Value: json.RawMessage(v)},
			{Format: formatVersion, Rev: 7, Nonce: "<&>", Recent: []stamp{{6, "a"}, {5, "b"}}, Value: json.RawMessage(v)},
		} {
			got, err := encode(&env)
			if err != nil {
				t.Fatalf("%s: %v", v, err)
			}
			want, err := encodeWithEncoder(&env)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encode(%s):\n got %s\nwant %s", v, got, want)
			}
			back, err := decode(got)
			if err != nil || back.Rev != env.Rev || back.Nonce != env.Nonce || !bytes.Equal(back.Value, env.Value) {
				t.Errorf("decode(encode(%s)) = %+v, %v", v, back, err)
			}
		}
	}
	for _, env := range []envelope{
		{Format: formatVersion, Rev: 2, Nonce: "r", Raw: []byte("\x00\xffbytes"), IsRaw: true},
		{Format: formatVersion, Rev: 3, Nonce: "e"},
	} {
		got, err := encode(&env)
		want, _ := encodeWithEncoder(&env)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("encode(%+v) = %s, %v; want %s", env, got, err, want)
		}
	}
}

func TestEncodeRefusesInvalidJSON(t *testing.T) {
	for _, v := range []string{`{"a":`, `{"a":1}}`, `nope`, "{\"a\":\"\xff\"}x"} {
		env := envelope{Format: formatVersion, Rev: 1, Nonce: "n", Value: json.RawMessage(v)}
		if b, err := encode(&env); err == nil {
			t.Errorf("encode accepted %q: %s", v, b)
		}
	}
}

// BenchmarkEncode: a ledger head's size of value, through json.RawMessage
// (the baseline: compacted byte by byte) and spliced in.
func BenchmarkEncode(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"rows":{`)
	for i := range 120 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"bucket\u0000some/key/of/an/object-` + strings.Repeat("x", i%17) + `":{"bucket":"bucket","key":"some/key","etag":"0123456789abcdef0123456789abcdef","seq":"0000000000000001","status":"pending","attempts":0,"token":0,"next":1700000000000,"updated":1700000000000}`)
	}
	sb.WriteString(`}}`)
	env := envelope{Format: formatVersion, Rev: 9, Nonce: "0123456789abcdef", Recent: []stamp{{8, "a"}, {7, "b"}}, Value: json.RawMessage(sb.String())}
	for _, c := range []struct {
		name string
		fn   func(*envelope) ([]byte, error)
	}{{"baseline=raw-message", encodeWithEncoder}, {"splice", encode}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(env.Value)))
			for b.Loop() {
				if _, err := c.fn(&env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
