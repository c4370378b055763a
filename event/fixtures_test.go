package event_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-s3/cairn/event"
)

// TestRecordedFixtures parses every notification recorded by other projects
// (testdata/README.md names each source, commit and licence) and checks what
// cairn makes of it. A new file in those folders must be added here.
func TestRecordedFixtures(t *testing.T) {
	t.Parallel()
	type want struct {
		format                 event.Format
		kind                   event.Kind
		name, bucket, key, seq string
		rejectedField          string // the record is refused, naming this field
	}
	const ptBucket = "lambda-artifacts-deafc19498e3f2df"
	fixtures := map[string]want{
		// A hand-written sample: its sequencer is not hex, which S3 never sends.
		"aws-lambda-go/s3-event.json":              {rejectedField: "Records[0].s3.object.sequencer"},
		"aws-lambda-go/s3-event-with-decoded.json": {rejectedField: "Records[0].s3.object.sequencer"},
		"aws-lambda-go/s3-lifecycle-event.json":    {rejectedField: "Records[0].s3.object.sequencer"},
		"aws-lambda-go/s3-glacier-event.json": {format: event.FormatS3, kind: event.Other, name: "ObjectRestore:Completed",
			bucket: "example-bucket", key: "glacier-test.txt", seq: "0A1B2C3D4E5F678901"},
		"aws-lambda-go/s3-restore-event.json": {format: event.FormatS3, kind: event.Other, name: "ObjectRestore:Completed",
			bucket: "example-bucket", key: "glacier-test.txt", seq: "0A1B2C3D4E5F678901"},
		"aws-lambda-go/s3-intelligenttier-event.json": {format: event.FormatS3, kind: event.Other, name: "IntelligentTiering:TransitionAccess",
			bucket: "example-bucket", key: "intelligent-tier-test.dat", seq: "0066ABC1234567890"},
		"aws-lambda-go/s3-replication-event.json": {format: event.FormatS3, kind: event.Other, name: "Replication:OperationFailedReplication",
			bucket: "amzn-s3-demo-bucket1", key: "replication-test.png", seq: "0066DA1CBF104C0D51"},
		"powertools/s3Event.json": {format: event.FormatS3, kind: event.Created, name: "ObjectCreated:Put",
			bucket: ptBucket, key: "b21b84d653bb07b05b1e6b33684dc11b", seq: "0C0F6F405D6ED209E1"},
		"powertools/s3EventDecodedKey.json": {rejectedField: "Records[0].s3.object.sequencer"},
		"powertools/s3EventDeleteObject.json": {format: event.FormatS3, kind: event.Removed, name: "ObjectRemoved:Delete",
			bucket: ptBucket, key: "b21b84d653bb07b05b1e6b33684dc11b", seq: "0C0F6F405D6ED209E1"},
		"powertools/s3EventGlacier.json": {format: event.FormatS3, kind: event.Created, name: "ObjectCreated:Put",
			bucket: ptBucket, key: "b21b84d653bb07b05b1e6b33684dc11b", seq: "0C0F6F405D6ED209E1"},
		"powertools/s3SqsEvent.json": {format: event.FormatSQS, kind: event.Created, name: "ObjectCreated:Put",
			bucket: "xxx", key: "test.pdf", seq: "00643717F9F8B85354"},
		"powertools/s3EventBridgeNotificationObjectCreatedEvent.json": {format: event.FormatEventBridge, kind: event.Created,
			name: "Object Created:PutObject", bucket: "example-bucket", key: "IMG_m7fzo3.jpg", seq: "006408CAD69598B05E"},
		"powertools/s3EventBridgeNotificationObjectDeletedEvent.json": {format: event.FormatEventBridge, kind: event.Removed,
			name: "Object Deleted:DeleteObject", bucket: "example-bucket", key: "IMG_m7fzo3.jpg", seq: "006408CAD69598B05E"},
		// A lifecycle expiration is a deletion.
		"powertools/s3EventBridgeNotificationObjectExpiredEvent.json": {format: event.FormatEventBridge, kind: event.Removed,
			name: "Object Deleted:Lifecycle Expiration", bucket: "example-bucket", key: "IMG_m7fzo3.jpg", seq: "006408CAD69598B05E"},
		"powertools/s3EventBridgeNotificationObjectRestoreCompletedEvent.json": {format: event.FormatEventBridge, kind: event.Other,
			name: "Object Restore Completed", bucket: "example-bucket", key: "IMG_m7fzo3.jpg", seq: "006408CAD69598B05E"},
	}
	files, err := filepath.Glob("testdata/*/*.json")
	if err != nil || len(files) != len(fixtures) {
		t.Fatalf("%d recorded fixtures on disk, %d in the table (%v)", len(files), len(fixtures), err)
	}
	for _, file := range files {
		rel, _ := filepath.Rel("testdata", file)
		w, ok := fixtures[filepath.ToSlash(rel)]
		if !ok {
			t.Errorf("%s: not in the table", rel)
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		evs, rejected, err := event.ParseAll(data)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if w.rejectedField != "" {
			if len(evs) != 0 || len(rejected) != 1 || rejected[0].Field != w.rejectedField || !errors.Is(rejected[0], event.ErrMalformed) {
				t.Errorf("%s: %+v %v, want the record refused naming %s", rel, evs, rejected, w.rejectedField)
			}
			continue
		}
		if len(evs) != 1 || len(rejected) != 0 {
			t.Errorf("%s: %+v %v, want one event", rel, evs, rejected)
			continue
		}
		ev := evs[0]
		if ev.Format != w.format || ev.Kind != w.kind || ev.Name != w.name || ev.Bucket != w.bucket || ev.Key != w.key || ev.Sequencer != w.seq {
			t.Errorf("%s:\n got %s %s %q %q %q %s\nwant %s %s %q %q %q %s", rel, ev.Format, ev.Kind, ev.Name, ev.Bucket, ev.Key, ev.Sequencer,
				w.format, w.kind, w.name, w.bucket, w.key, w.seq)
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: %v", rel, err)
		}
	}
}
