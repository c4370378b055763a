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
	"github.com/cairn-s3/cairn/internal/testenv"
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
		name, key string
		kind      event.Kind
	}
	var wants []want
	for _, k := range keys {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		wants = append(wants, want{"ObjectCreated:Put", k, event.Created})
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
	wants = append(wants, want{"ObjectCreated:PutTagging", k, event.Other}, want{"ObjectCreated:DeleteTagging", k, event.Other},
		want{"ObjectRemoved:Delete", k, event.Removed}, want{"ObjectRemoved:NoOP", "in/never\nexisted", event.Other})
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
		if !slices.ContainsFunc(got, func(e event.Event) bool {
			return e.Name == w.name && e.Key == w.key && e.Kind == w.kind && e.Bucket == bucket && e.Format == event.FormatMinIO && e.Validate() == nil
		}) {
			t.Errorf("no %s event of kind %s for %q among:\n%+v", w.name, w.kind, w.key, got)
		}
	}
}
