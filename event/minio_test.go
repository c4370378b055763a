package event_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// TestMinIOSends: what a real MinIO sends to a webhook is parsed as it means.
// Keys with control characters (which MinIO stores) arrive byte-exact; tag
// updates, filed by MinIO under ObjectCreated, are ignorable; a delete of a
// missing key is NoOP; writes and deletes are changes.
func TestMinIOSends(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []event.Event
	var bad []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if len(body) > 0 { // MinIO checks the target with an empty request at start-up
			evs, err := event.Parse(body)
			mu.Lock()
			if err != nil {
				bad = append(bad, fmt.Sprintf("%v: %s", err, body))
			}
			got = append(got, evs...)
			mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	ep := testenv.OwnMinIO(t, "MINIO_NOTIFY_WEBHOOK_ENABLE_FIXTURE=on", "MINIO_NOTIFY_WEBHOOK_ENDPOINT_FIXTURE="+srv.URL)
	b, storeURL := testenv.NewBucket(t, ep)
	c := b.Client()
	bucket := strings.TrimPrefix(storeURL[:strings.IndexByte(storeURL, '?')], "s3://")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: aws.String(bucket),
		NotificationConfiguration: &s3types.NotificationConfiguration{QueueConfigurations: []s3types.QueueConfiguration{{
			QueueArn: aws.String("arn:minio:sqs::FIXTURE:webhook"), Events: []s3types.Event{"s3:ObjectCreated:*", "s3:ObjectRemoved:*"},
		}}}}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"in/new\nline.txt", "in/tab\tdel\x7f c1\u009b esc\x1b[2J cr\r.txt", "in/plain + ünï.txt"}
	type want struct {
		name, key   string
		kind        event.Kind
		bucket      string // "": the unversioned bucket
		version     string // for the versioned bucket's removals
		versionOnly bool
	}
	var wants []want
	for _, k := range keys {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		wants = append(wants, want{name: "ObjectCreated:Put", key: k, kind: event.Created})
	}
	k := keys[0]
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(k),
		Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("t"), Value: aws.String("v")}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("in/never\nexisted")}); err != nil {
		t.Fatal(err)
	}
	wants = append(wants, want{name: "ObjectCreated:PutTagging", key: k, kind: event.Other}, want{name: "ObjectCreated:DeleteTagging", key: k, kind: event.Other},
		want{name: "ObjectRemoved:Delete", key: k, kind: event.Removed}, want{name: "ObjectRemoved:NoOP", key: "in/never\nexisted", kind: event.Other})

	// A versioned bucket: a DELETE naming a version removes that version only
	// (the key stays), a DELETE without one places a delete marker, and a
	// DELETE of the marker by its id brings the content back.
	_, vURL := testenv.NewBucket(t, ep)
	vb := strings.TrimPrefix(vURL[:strings.IndexByte(vURL, '?')], "s3://")
	if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(vb),
		VersioningConfiguration: &s3types.VersioningConfiguration{Status: s3types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: aws.String(vb),
		NotificationConfiguration: &s3types.NotificationConfiguration{QueueConfigurations: []s3types.QueueConfiguration{{
			QueueArn: aws.String("arn:minio:sqs::FIXTURE:webhook"), Events: []s3types.Event{"s3:ObjectCreated:*", "s3:ObjectRemoved:*"},
		}}}}); err != nil {
		t.Fatal(err)
	}
	const vk = "v/doc\n1.txt"
	var versions []string
	for _, body := range []string{"one", "two"} {
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(vb), Key: aws.String(vk), Body: strings.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, aws.ToString(out.VersionId))
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(vb), Key: aws.String(vk), VersionId: aws.String(versions[0])}); err != nil {
		t.Fatal(err)
	}
	marker, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(vb), Key: aws.String(vk)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(vb), Key: aws.String(vk), VersionId: marker.VersionId}); err != nil {
		t.Fatal(err)
	}
	wants = append(wants,
		want{name: "ObjectCreated:Put", key: vk, kind: event.Created, bucket: vb},
		want{name: "ObjectCreated:Put", key: vk, kind: event.Created, bucket: vb},
		want{name: "ObjectRemoved:Delete", key: vk, kind: event.Removed, bucket: vb, version: versions[0], versionOnly: true},
		want{name: "ObjectRemoved:DeleteMarkerCreated", key: vk, kind: event.Removed, bucket: vb, version: aws.ToString(marker.VersionId)},
		// MinIO announces the marker's deletion as DeleteMarkerCreated again,
		// with the marker's version id: the ledger tells it apart by the
		// version id it already accepted (see driver.Decide).
		want{name: "ObjectRemoved:DeleteMarkerCreated", key: vk, kind: event.Removed, bucket: vb, version: aws.ToString(marker.VersionId)})
	for {
		mu.Lock()
		n := len(got) + len(bad)
		mu.Unlock()
		if n >= len(wants) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("MinIO sent %d of %d events", n, len(wants))
		case <-time.After(50 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("bodies MinIO sent that did not parse: %q", bad)
	}
	for _, w := range wants {
		b := w.bucket
		if b == "" {
			b = bucket
		}
		if !slices.ContainsFunc(got, func(e event.Event) bool {
			return e.Name == w.name && e.Key == w.key && e.Kind == w.kind && e.Bucket == b && e.Format == event.FormatMinIO && e.Validate() == nil &&
				e.VersionOnly == w.versionOnly && (w.version == "" || e.VersionID == w.version)
		}) {
			t.Errorf("no %s event of kind %s (version %q, version only %v) for %q in %s among:\n%+v", w.name, w.kind, w.version, w.versionOnly, w.key, b, got)
		}
	}
}
