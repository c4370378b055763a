package event_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/cairn-s3/cairn/event"
)

// A MinIO webhook body (as recorded from a real server, in testdata) parses
// into normalised events: the key is decoded ("%2F", "+" and UTF-8 escapes),
// the "s3:" prefix is dropped from the name, and the kind says what happened.
func ExampleParse() {
	body, err := os.ReadFile("testdata/minio-webhook-put.json")
	if err != nil {
		panic(err)
	}
	evs, err := event.Parse(body)
	if err != nil {
		panic(err)
	}
	for _, e := range evs {
		fmt.Println("bucket:", e.Bucket)
		fmt.Println("key:", e.Key)
		fmt.Println("kind:", e.Kind, "name:", e.Name, "format:", e.Format)
		fmt.Println("sequencer:", e.Sequencer, "etag:", e.ETag)
	}

	_, err = event.Parse([]byte(`{"hello":"world"}`))
	fmt.Println("not an event:", errors.Is(err, event.ErrUnknownFormat))
	// Output:
	// bucket: probe-events
	// key: dir/with space/ünï cødé 日本 ✓ +&=?.txt
	// kind: created name: ObjectCreated:Put format: minio
	// sequencer: 18EA62B45DFE78D5 etag: d5103fca6dfc78fc2c44c04420b7ea05
	// not an event: true
}
