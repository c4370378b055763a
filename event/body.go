package event

import (
	"encoding/json"
	"net/url"

	"github.com/aws/aws-lambda-go/events"
)

// S3Body renders events as an S3 notification body (the "Records" shape SQS
// and Lambda receive), keys form-URL-encoded as S3 sends them. Senders in tests,
// benchmarks and the demo use it; Parse(S3Body(evs...)) gives evs back (Format
// aside).
func S3Body(evs ...Event) []byte {
	type object struct {
		Key       string `json:"key"`
		Size      int64  `json:"size"`
		ETag      string `json:"eTag,omitempty"`
		VersionID string `json:"versionId,omitempty"`
		Sequencer string `json:"sequencer,omitempty"`
	}
	type s3 struct {
		SchemaVersion string          `json:"s3SchemaVersion"`
		Bucket        events.S3Bucket `json:"bucket"`
		Object        object          `json:"object"`
	}
	type record struct {
		events.S3EventRecord
		S3 s3 `json:"s3"`
	}
	out := struct {
		Records []record `json:"Records"`
	}{Records: make([]record, len(evs))}
	for i, e := range evs {
		name := e.Name
		if name == "" {
			name = "ObjectCreated:Put"
			if e.Kind == Removed {
				name = "ObjectRemoved:Delete"
			}
		}
		r := record{S3EventRecord: events.S3EventRecord{EventVersion: "2.1", EventSource: "aws:s3", AWSRegion: e.Region,
			EventTime: e.Time, EventName: name,
			ResponseElements: map[string]string{"x-amz-request-id": e.RequestID, "x-amz-id-2": e.HostID}}}
		r.S3 = s3{SchemaVersion: "1.0", Bucket: events.S3Bucket{Name: e.Bucket, Arn: "arn:aws:s3:::" + e.Bucket},
			Object: object{Key: url.QueryEscape(e.Key), Size: e.Size, ETag: e.ETag, VersionID: e.VersionID, Sequencer: e.Sequencer}}
		out.Records[i] = r
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // only strings, numbers and times: cannot fail
	}
	return b
}
