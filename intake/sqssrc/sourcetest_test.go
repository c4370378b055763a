package sqssrc_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/sourcetest"
	"github.com/cairn-s3/cairn/intake/sqssrc"
)

// TestSources runs the sources conformance suite on the SQS protocol fake
// (fake_test.go says why a fake), one queue per case, on a queue without a
// redrive policy: poison messages are deleted.
func TestSources(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourcetest.Harness{Open: func(t *testing.T) sourcetest.Queue {
		return &sqsQueue{f: newFakeSQS(t)}
	}})
}

type sqsQueue struct{ f *fakeSQS }

func (q *sqsQueue) Publish(_ *testing.T, body []byte) { q.f.send(string(body)) }

func (q *sqsQueue) Source(t *testing.T) intake.Source {
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(q.f.srv.URL), Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
	src, err := sqssrc.Open(context.Background(), q.f.queueURL(), &sqssrc.Options{Client: c, Visibility: time.Second, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// Outstanding: the messages still in the queue, visible or not.
func (q *sqsQueue) Outstanding(context.Context) (int, error) { return q.f.left(), nil }
