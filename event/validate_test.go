package event_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/event"
)

func record(bucket, rawKey, seq string) string {
	return `{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"` + bucket +
		`"},"object":{"key":"` + rawKey + `","size":1,"sequencer":"` + seq + `"}}}`
}

// Keys, buckets and sequencers no ledger should see are refused with the
// field named; odd but valid keys pass untouched.
func TestRecordLimits(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", event.MaxKeyLen)
	bad := []struct {
		name, bucket, key, seq, field string
	}{
		{"NUL in key", "bkt", "a%00b", "0A", "s3.object.key"},
		{"NUL alone", "bkt", "%00", "0A", "s3.object.key"},
		{"invalid UTF-8", "bkt", "a%FF%FEb", "0A", "s3.object.key"},
		{"too long", "bkt", long + "x", "0A", "s3.object.key"},
		{"2700 bytes", "bkt", strings.Repeat("x", 2700), "0A", "s3.object.key"},
		{"bucket with a slash", "a/b", "k", "0A", "s3.bucket.name"},
		{"bucket with a space", "a b", "k", "0A", "s3.bucket.name"},
		{"bucket in unicode", "bück", "k", "0A", "s3.bucket.name"},
		{"bucket too long", strings.Repeat("b", 256), "k", "0A", "s3.bucket.name"},
		{"sequencer not hex", "bkt", "k", "0AZ", "s3.object.sequencer"},
		{"sequencer absurdly long", "bkt", "k", strings.Repeat("A", 65), "s3.object.sequencer"},
	}
	for _, tc := range bad {
		_, err := event.Parse([]byte(`{"Records":[` + record(tc.bucket, tc.key, tc.seq) + `]}`))
		var pe *event.ParseError
		if !errors.As(err, &pe) || !errors.Is(err, event.ErrMalformed) || pe.Field != "Records[0]."+tc.field {
			t.Errorf("%s: %v, want ErrMalformed naming Records[0].%s", tc.name, err, tc.field)
		}
	}
	// Every key S3 stores is accepted byte-exact, control characters included
	// (MinIO and S3 store keys with newlines, tabs, ESC, DEL and C1).
	good := []string{"dir/with space/ünï cødé 日本 ✓ +&=?.txt", "a+b", "100%", "../../etc/passwd", "a//b", "/lead", "trail/", long, "tab-free\u00a0nbsp", "emoji 🪨",
		"new\nline", "tab\tkey", "cr\r\nlf", "esc\x1b]0;x\a\x1b[2J", "del\x7f", "c1\u0085\u009b2J", "\x01\x02\x1f", "\n", strings.Repeat("\n", event.MaxKeyLen)}
	for _, key := range good {
		evs, err := event.Parse([]byte(`{"Records":[` + record("legacy_Bucket.1", url.QueryEscape(key), "0a") + `]}`))
		if err != nil || len(evs) != 1 || evs[0].Key != key {
			t.Errorf("key %q: %+v %v, want it accepted as is", key, evs, err)
		}
		if err := event.ValidateKey(key); err != nil {
			t.Errorf("ValidateKey(%q): %v", key, err)
		}
		// EventBridge sends keys raw, JSON-escaped.
		raw, _ := json.Marshal(key)
		eb := `{"source":"aws.s3","detail-type":"Object Created","detail":{"bucket":{"name":"b"},"object":{"key":` + string(raw) + `,"size":1}}}`
		if evs, err := event.Parse([]byte(eb)); err != nil || len(evs) != 1 || evs[0].Key != key {
			t.Errorf("EventBridge key %q: %+v %v, want it accepted as is", key, evs, err)
		}
	}
	if err := event.ValidateKey("a\x00b"); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("ValidateKey with NUL: %v, want an error naming NUL and why", err)
	}
}

// One bad record does not sink the message: ParseAll keeps the good ones and
// names each bad one; Parse stays all or nothing.
func TestParseAllKeepsGoodRecords(t *testing.T) {
	t.Parallel()
	body := `{"Records":[` + record("bkt", "good1", "01") + `,` + record("bkt", "bad%00", "02") + `,` +
		`{"eventName":"ObjectTeleported:Beam","s3":{"bucket":{"name":"bkt"},"object":{"key":"x"}}},` +
		record("bkt", "good2", "03") + `,{"eventSource":"aws:sqs","body":"not json"}]}`
	evs, rejected, err := event.ParseAll([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Key != "good1" || evs[1].Key != "good2" {
		t.Fatalf("kept %+v, want good1 and good2", evs)
	}
	want := []struct {
		field string
		kind  error
	}{{"Records[1].s3.object.key", event.ErrMalformed}, {"Records[2].eventName", event.ErrUnknownEventType}, {"Records[4].body", event.ErrUnknownFormat}}
	if len(rejected) != len(want) {
		t.Fatalf("rejected %v, want %d", rejected, len(want))
	}
	for i, w := range want {
		if rejected[i].Field != w.field || !errors.Is(rejected[i], w.kind) {
			t.Errorf("rejection %d: %v, want %s (%v)", i, rejected[i], w.field, w.kind)
		}
	}
	if _, err := event.Parse([]byte(body)); err == nil {
		t.Fatal("Parse accepted a message with bad records")
	}
	// Message-level errors stay errors.
	for _, body := range []string{`{"Records":[]}`, `{"Records":{}}`, `[1]`, `{"hello":1}`} {
		if evs, rej, err := event.ParseAll([]byte(body)); err == nil || len(evs) > 0 || len(rej) > 0 {
			t.Errorf("%s: %v %v %v, want a message-level error", body, evs, rej, err)
		}
	}
}
