package event_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
)

// The fixtures were captured from a real MinIO server (webhook bodies).
func TestMinIOFixtures(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/minio-webhook-all.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wantKind := map[string]event.Kind{
		"ObjectCreated:Put": event.Created, "ObjectCreated:Copy": event.Created, "ObjectRemoved:Delete": event.Removed,
		"ObjectRemoved:NoOP": event.Other, "ObjectRemoved:DeleteMarkerCreated": event.Removed,
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var line struct {
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		var top struct{ EventName, Key string }
		json.Unmarshal(line.Body, &top)
		evs, err := event.Parse(line.Body)
		if err != nil {
			t.Fatalf("fixture %d: %v", n, err)
		}
		if len(evs) != 1 {
			t.Fatalf("fixture %d: %d events", n, len(evs))
		}
		ev := evs[0]
		// MinIO's top-level Key is "bucket/key" unencoded: the decoded record key must match it.
		if ev.Bucket+"/"+ev.Key != top.Key {
			t.Errorf("fixture %d: decoded %q/%q, MinIO says %q", n, ev.Bucket, ev.Key, top.Key)
		}
		if ev.Format != event.FormatMinIO || ev.Name != strings.TrimPrefix(top.EventName, "s3:") || ev.Kind != wantKind[ev.Name] {
			t.Errorf("fixture %d: %+v", n, ev)
		}
		if ev.Sequencer == "" || ev.Time.IsZero() || ev.RequestID == "" {
			t.Errorf("fixture %d: missing sequencer/time/request id: %+v", n, ev)
		}
		if ev.Kind == event.Created && (ev.ETag == "" || ev.Size == 0) {
			t.Errorf("fixture %d: created without etag/size: %+v", n, ev)
		}
		n++
	}
	if n != 9 {
		t.Fatalf("%d fixtures", n)
	}
	data, _ := os.ReadFile("testdata/minio-webhook-put.json")
	evs, err := event.Parse(data)
	if err != nil || evs[0].Key != "dir/with space/ünï cødé 日本 ✓ +&=?.txt" {
		t.Fatalf("put fixture: %+v %v", evs, err)
	}
}

const awsRecord = `{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"eu-west-1","eventTime":"2024-01-02T03:04:05.678Z",
"eventName":"ObjectCreated:Put","responseElements":{"x-amz-request-id":"REQ1","x-amz-id-2":"HOST1"},
"s3":{"s3SchemaVersion":"1.0","bucket":{"name":"lake","arn":"arn:aws:s3:::lake"},
"object":{"key":"raw/red+flower%281%29.jpg","size":1024,"eTag":"0123456789abcdef0123456789abcdef","versionId":"v1","sequencer":"0055AED6DCD90281E5"}}}`

func TestShapes(t *testing.T) {
	t.Parallel()
	s3 := `{"Records":[` + awsRecord + `,` + strings.Replace(awsRecord, `"size":1024`, `"size":7`, 1) + `]}`
	snsBody, _ := json.Marshal(map[string]string{"Type": "Notification", "MessageId": "m", "Message": s3})
	sqsLambda, _ := json.Marshal(map[string]any{"Records": []map[string]any{{"eventSource": "aws:sqs", "body": string(snsBody)}}})
	snsLambda, _ := json.Marshal(map[string]any{"Records": []map[string]any{{"EventSource": "aws:sns", "Sns": map[string]string{"Message": s3}}}})
	eb := `{"version":"0","id":"x","detail-type":"Object Created","source":"aws.s3","time":"2024-01-02T03:04:05Z","region":"eu-west-1",
"detail":{"version":"0","bucket":{"name":"lake"},"object":{"key":"raw/red flower(1).jpg","size":1024,"etag":"abc","version-id":"v1","sequencer":"0055AED6DCD90281E5"},"request-id":"REQ1","reason":"PutObject"}}`
	test := `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2024-01-02T03:04:05.000Z","Bucket":"lake","RequestId":"R","HostId":"H"}`
	tests := []struct {
		name   string
		data   string
		n      int
		format event.Format
		kind   event.Kind
	}{
		{"s3", s3, 2, event.FormatS3, event.Created},
		{"sns", string(snsBody), 2, event.FormatSNS, event.Created},
		{"sqs-lambda-of-sns", string(sqsLambda), 2, event.FormatSNS, event.Created}, // the innermost envelope names the format
		{"sns-lambda", string(snsLambda), 2, event.FormatSNS, event.Created},
		{"eventbridge", eb, 1, event.FormatEventBridge, event.Created},
		{"test-event", test, 1, event.FormatS3, event.Test},
	}
	for _, tc := range tests {
		evs, err := event.Parse([]byte(tc.data))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(evs) != tc.n {
			t.Errorf("%s: %d events, want %d", tc.name, len(evs), tc.n)
			continue
		}
		ev := evs[0]
		if ev.Format != tc.format || ev.Kind != tc.kind {
			t.Errorf("%s: format %s kind %s", tc.name, ev.Format, ev.Kind)
		}
		if tc.kind == event.Created && (ev.Key != "raw/red flower(1).jpg" || ev.Bucket != "lake" || ev.Sequencer != "0055AED6DCD90281E5" || ev.VersionID != "v1") {
			t.Errorf("%s: %+v", tc.name, ev)
		}
		if tc.kind == event.Test && !ev.Ignorable() {
			t.Errorf("test event not ignorable")
		}
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	rec := func(old, new string) string { return `{"Records":[` + strings.Replace(awsRecord, old, new, 1) + `]}` }
	tests := []struct {
		name, data string
		want       error
		field      string
	}{
		{"not json", `{"Records": [`, event.ErrMalformed, ""},
		{"array", `[1,2]`, event.ErrUnknownFormat, ""},
		{"unknown shape", `{"hello":"world"}`, event.ErrUnknownFormat, ""},
		{"empty records", `{"Records":[]}`, event.ErrMalformed, "Records"},
		{"bad key encoding", rec(`raw/red+flower%281%29.jpg`, `bad%zzkey`), event.ErrMalformed, "Records[0].s3.object.key"},
		{"missing key", rec(`"key":"raw/red+flower%281%29.jpg",`, ``), event.ErrMalformed, "Records[0].s3.object.key"},
		{"size as string", rec(`"size":1024`, `"size":"big"`), event.ErrMalformed, "size"},
		{"bad sequencer", rec(`0055AED6DCD90281E5`, `not-hex!`), event.ErrMalformed, "Records[0].s3.object.sequencer"},
		{"unknown event", rec(`ObjectCreated:Put`, `s3:Frobnicated`), event.ErrUnknownEventType, "Records[0].eventName"},
		{"no event name", rec(`"eventName":"ObjectCreated:Put",`, ``), event.ErrMalformed, "Records[0].eventName"},
		{"sns confirmation", `{"Type":"SubscriptionConfirmation","SubscribeURL":"https://x"}`, event.ErrUnknownFormat, "Type"},
		{"eventbridge unknown", `{"source":"aws.s3","detail-type":"Object Teleported","detail":{}}`, event.ErrUnknownEventType, "detail-type"},
		{"sns bad inner", `{"Type":"Notification","Message":"{\"Records\":5}"}`, event.ErrMalformed, "Message.Records"},
	}
	for _, tc := range tests {
		_, err := event.Parse([]byte(tc.data))
		var pe *event.ParseError
		if !errors.As(err, &pe) || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want a ParseError wrapping %v", tc.name, err, tc.want)
			continue
		}
		if !strings.Contains(pe.Field, tc.field) {
			t.Errorf("%s: field %q, want it to name %q (%v)", tc.name, pe.Field, tc.field, err)
		}
	}
}

func TestCompareSequencer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"0055AED6DCD90281E5", "0055AED6DCD90281E6", -1},
		{"0055aed6dcd90281e5", "0055AED6DCD90281E5", 0}, // case-insensitive
		{"0A", "0A00", 0}, // right-padding with zeros
		{"1", "0F", 1},    // right-padded "10" > "0F" (left-padding would say "01" < "0F")
		{"0055AED6DCD90281E5", "0055AED6DCD90281E500", 0},
		{"18EA62B45DD80160", "18EA62B45DFE78D5", -1}, // MinIO timestamps
		{"", "00", 0},
		{"FF", "FF01", -1},
	}
	for _, tc := range tests {
		if got := event.CompareSequencer(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareSequencer(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := event.CompareSequencer(tc.b, tc.a); got != -tc.want {
			t.Errorf("CompareSequencer(%q, %q) = %d, want %d (antisymmetry)", tc.b, tc.a, got, -tc.want)
		}
		if (tc.want == 0) != (event.NormalizeSequencer(tc.a) == event.NormalizeSequencer(tc.b)) {
			t.Errorf("NormalizeSequencer disagrees with CompareSequencer on %q, %q", tc.a, tc.b)
		}
	}
}

// addFixtures seeds a fuzz target with every recorded notification in
// testdata (MinIO's captures, aws-lambda-go's and Powertools' samples).
func addFixtures(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	more, _ := filepath.Glob("testdata/*/*.json")
	for _, name := range append(files, more...) {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
}

func FuzzParse(f *testing.F) {
	addFixtures(f)
	f.Add([]byte(`{"Records":[` + awsRecord + `]}`))
	f.Add([]byte(`{"Type":"Notification","Message":"{}"}`))
	f.Add([]byte(`{"source":"aws.s3","detail-type":"Object Deleted","detail":{"bucket":{"name":"b"},"object":{"key":"k"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := event.Parse(data)
		if err != nil {
			var pe *event.ParseError
			if !errors.As(err, &pe) || !(errors.Is(err, event.ErrMalformed) || errors.Is(err, event.ErrUnknownFormat) || errors.Is(err, event.ErrUnknownEventType)) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		for _, ev := range evs {
			if !ev.Ignorable() && (ev.Bucket == "" || ev.Key == "") {
				t.Fatalf("a change without bucket or key: %+v", ev)
			}
			if err := ev.Validate(); err != nil && ev.Kind != event.Test {
				t.Fatalf("Parse returned an event that fails Validate (%v): %+v", err, ev)
			}
			if ev.VersionOnly && (ev.Kind != event.Removed || ev.VersionID == "" || ev.VersionID == "null") {
				t.Fatalf("VersionOnly on an event that is not the removal of a named version: %+v", ev)
			}
		}
		// ParseAll: the same good records, every bad one named.
		all, rejected, err := event.ParseAll(data)
		if err != nil || len(rejected) > 0 {
			t.Fatalf("ParseAll disagrees with Parse: %v %v", rejected, err)
		}
		if len(all) != len(evs) {
			t.Fatalf("ParseAll found %d events, Parse %d", len(all), len(evs))
		}
	})
}

func FuzzParseAll(f *testing.F) {
	addFixtures(f)
	f.Add([]byte(`{"Records":[` + awsRecord + `,{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"%00"}}}]}`))
	f.Add([]byte(`{"Records":[{"eventSource":"aws:sqs","body":"{}"},` + awsRecord + `]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, rejected, err := event.ParseAll(data)
		if err != nil {
			if len(evs) > 0 || len(rejected) > 0 {
				t.Fatalf("a message-level error with results: %v", err)
			}
			return
		}
		for _, pe := range rejected {
			if pe.Field == "" || !(errors.Is(pe, event.ErrMalformed) || errors.Is(pe, event.ErrUnknownFormat) || errors.Is(pe, event.ErrUnknownEventType)) {
				t.Fatalf("a rejection without a field or a known kind: %v", pe)
			}
		}
		for _, ev := range evs {
			if ev.Kind != event.Test {
				if err := ev.Validate(); err != nil {
					t.Fatalf("ParseAll kept an invalid event (%v): %+v", err, ev)
				}
			}
		}
	})
}

func FuzzCompareSequencer(f *testing.F) {
	f.Add("0A", "0A00", "1")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		ab, ba := event.CompareSequencer(a, b), event.CompareSequencer(b, a)
		if ab != -ba {
			t.Fatalf("not antisymmetric: %q %q", a, b)
		}
		if ab <= 0 && event.CompareSequencer(b, c) <= 0 && event.CompareSequencer(a, c) > 0 {
			t.Fatalf("not transitive: %q %q %q", a, b, c)
		}
	})
}

func TestS3BodyRoundTrip(t *testing.T) {
	t.Parallel()
	in := []event.Event{
		{Bucket: "b", Key: "dir/ünï cødé +&=?%.txt", ETag: "abc", Size: 12, Sequencer: "0A1B", Kind: event.Created, Name: "ObjectCreated:Put",
			Time: time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC), RequestID: "r1", HostID: "h1", Region: "eu-west-1", VersionID: "v1"},
		{Bucket: "b", Key: "gone", Sequencer: "0A1C", Kind: event.Removed, Name: "ObjectRemoved:Delete"},
		{Bucket: "b", Key: "new\nline\ttab\r\x1b[2J\x7f\u009b", Sequencer: "0A1D", Kind: event.Created, Name: "ObjectCreated:Put"},
	}
	out, err := event.Parse(event.S3Body(in...))
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i].Format = event.FormatS3
		if !reflect.DeepEqual(in[i], out[i]) {
			t.Errorf("round trip %d:\n got %+v\nwant %+v", i, out[i], in[i])
		}
	}
}
