package sqssrc_test

// No SQS implementation can run on this machine: there is no AWS account,
// ElasticMQ needs a JVM, and goaws (v0.4.4, the newest on the Go module proxy)
// speaks only the query/XML protocol that aws-sdk-go-v2's SQS client no longer
// uses. So the source is tested against this protocol-level fake: an HTTP
// server speaking SQS's AWS JSON 1.0
// protocol to the real aws-sdk-go-v2 client, with the documented semantics the
// source relies on: a received message is invisible for its visibility timeout
// and then delivered again with a new receipt handle; only the newest receipt
// handle may delete or change visibility (ReceiptHandleIsInvalid otherwise);
// DeleteMessageBatch and ChangeMessageVisibilityBatch report per-entry
// failures; long polling waits up to WaitTimeSeconds; ApproximateReceiveCount
// counts receives; SendMessage adds a message (for the package's Example);
// GetQueueAttributes reports a RedrivePolicy when one is set
// (the fake does not move messages itself: the source must not rely on it).
// Faults can be injected: failing delete entries, failing whole delete
// requests (500), refusing GetQueueAttributes (AccessDenied).

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeMsg struct {
	id, body, handle string
	visibleAt        time.Time
	receives         int
}

type fakeSQS struct {
	srv *httptest.Server

	mu         sync.Mutex
	msgs       []*fakeMsg
	nextHandle int
	// failDeletes counts down: that many delete entries fail (server fault).
	failDeletes int
	// failDeleteRequests counts down: that many DeleteMessageBatch requests
	// fail whole with a 500.
	failDeleteRequests int
	// redrive is the queue's RedrivePolicy attribute ("" for none).
	redrive string
	// denyAttributes refuses GetQueueAttributes with AccessDenied.
	denyAttributes bool
	deletes        int
	extends        int
	receives       int
}

func newFakeSQS(t *testing.T) *fakeSQS {
	f := startFakeSQS()
	t.Cleanup(f.srv.Close)
	return f
}

// startFakeSQS starts a fake queue; its srv.Close stops it.
func startFakeSQS() *fakeSQS {
	f := &fakeSQS{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// endpoint is the fake's SQS endpoint (the client's BaseEndpoint).
func (f *fakeSQS) endpoint() string { return f.srv.URL }

func (f *fakeSQS) queueURL() string { return f.srv.URL + "/000000000000/uploads" }

func (f *fakeSQS) send(body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, &fakeMsg{id: fmt.Sprintf("m%d", len(f.msgs)), body: body})
}

// receivesOf is how many times the message with this body was received.
func (f *fakeSQS) receivesOf(body string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.msgs {
		if m.body == body {
			return m.receives
		}
	}
	return -1
}

// left is how many messages are still in the queue (visible or not).
func (f *fakeSQS) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.msgs)
}

func (f *fakeSQS) serve(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, "MalformedQueryString", err.Error())
		return
	}
	switch op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS."); op {
	case "ReceiveMessage":
		f.receive(r.Context(), w, in)
	case "SendMessage":
		body, _ := in["MessageBody"].(string)
		f.send(body)
		f.mu.Lock()
		id := f.msgs[len(f.msgs)-1].id
		f.mu.Unlock()
		sum := md5.Sum([]byte(body))
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(map[string]any{"MessageId": id, "MD5OfMessageBody": hex.EncodeToString(sum[:])})
	case "GetQueueAttributes":
		f.mu.Lock()
		deny, redrive := f.denyAttributes, f.redrive
		f.mu.Unlock()
		if deny {
			fail(w, "AccessDenied", "not authorized to perform sqs:GetQueueAttributes")
			return
		}
		attrs := map[string]string{}
		if redrive != "" {
			attrs["RedrivePolicy"] = redrive
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(map[string]any{"Attributes": attrs})
	case "DeleteMessageBatch":
		f.mu.Lock()
		failWhole := f.failDeleteRequests > 0
		if failWhole {
			f.failDeleteRequests--
		}
		f.mu.Unlock()
		if failWhole {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(500)
			_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#InternalError", "message": "injected"})
			return
		}
		f.batch(w, in, func(m *fakeMsg, e map[string]any) (string, bool) {
			if f.failDeletes > 0 {
				f.failDeletes--
				return "InternalError", false
			}
			f.deletes++
			for i, x := range f.msgs {
				if x == m {
					f.msgs = append(f.msgs[:i], f.msgs[i+1:]...)
				}
			}
			return "", false
		})
	case "ChangeMessageVisibilityBatch":
		f.batch(w, in, func(m *fakeMsg, e map[string]any) (string, bool) {
			secs, _ := e["VisibilityTimeout"].(float64)
			m.visibleAt = time.Now().Add(time.Duration(secs) * time.Second)
			f.extends++
			return "", false
		})
	default:
		fail(w, "InvalidAction", op)
	}
}

func fail(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(400)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}

// receive answers a ReceiveMessage; a long poll ends early when the client
// goes away (ctx).
func (f *fakeSQS) receive(ctx context.Context, w http.ResponseWriter, in map[string]any) {
	max := 1
	if n, ok := in["MaxNumberOfMessages"].(float64); ok {
		max = int(n)
	}
	vis := 30 * time.Second
	if n, ok := in["VisibilityTimeout"].(float64); ok {
		vis = time.Duration(n) * time.Second
	}
	wait, _ := in["WaitTimeSeconds"].(float64)
	deadline := time.Now().Add(time.Duration(wait * float64(time.Second)))
	for {
		if ctx.Err() != nil {
			return // the client is gone: receive nothing for it
		}
		f.mu.Lock()
		var out []map[string]any
		now := time.Now()
		for _, m := range f.msgs {
			if len(out) == max {
				break
			}
			if m.visibleAt.After(now) {
				continue
			}
			f.nextHandle++
			m.handle = fmt.Sprintf("h%d-%s", f.nextHandle, m.id)
			m.visibleAt = now.Add(vis)
			m.receives++
			sum := md5.Sum([]byte(m.body))
			out = append(out, map[string]any{"MessageId": m.id, "ReceiptHandle": m.handle, "Body": m.body, "MD5OfBody": hex.EncodeToString(sum[:]),
				"Attributes": map[string]string{"ApproximateReceiveCount": fmt.Sprint(m.receives)}})
		}
		f.receives++
		f.mu.Unlock()
		if len(out) > 0 || time.Now().After(deadline) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			_ = json.NewEncoder(w).Encode(map[string]any{"Messages": out})
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// batch applies op to each entry whose receipt handle is current.
func (f *fakeSQS) batch(w http.ResponseWriter, in map[string]any, op func(m *fakeMsg, e map[string]any) (string, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	entries, _ := in["Entries"].([]any)
	ok := []map[string]any{}
	failed := []map[string]any{}
	for _, x := range entries {
		e, _ := x.(map[string]any)
		id, _ := e["Id"].(string)
		handle, _ := e["ReceiptHandle"].(string)
		var m *fakeMsg
		for _, c := range f.msgs {
			if c.handle == handle {
				m = c
			}
		}
		if m == nil {
			failed = append(failed, map[string]any{"Id": id, "Code": "ReceiptHandleIsInvalid", "Message": "stale receipt handle", "SenderFault": true})
			continue
		}
		if code, _ := op(m, e); code != "" {
			failed = append(failed, map[string]any{"Id": id, "Code": code, "Message": "injected", "SenderFault": false})
			continue
		}
		ok = append(ok, map[string]any{"Id": id})
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(map[string]any{"Successful": ok, "Failed": failed})
}
