package cli_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keyScript is an exec handler that keeps, per key, the key as its
// environment gave it and the JSON it read on stdin, byte for byte.
const keyScript = `#!/bin/sh
set -eu
f="$OUT/$(printf %s "$CAIRN_KEY" | sha256sum | cut -c1-64)"
cat > "$f.json.tmp"
printf %s "$CAIRN_KEY" > "$f.env.tmp"
mv "$f.json.tmp" "$f.json"
mv "$f.env.tmp" "$f.env"
`

// TestServeMinIOWebhookEveryKey: MinIO wired as the README says (webhook
// target with an auth token and a queue_dir, the whole bucket subscribed).
// A key holding a newline used to be refused with a 400, which MinIO retries
// for ever from its queue, holding every later event of the bucket behind
// it. Now: the newline key and the ordinary uploads after it are all
// processed, the key byte-exact in the handler's environment and JSON; and
// cairn's own objects in the bucket (a probe verdict) are skipped while a
// user key that merely looks like one is processed.
func TestServeMinIOWebhookEveryKey(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "0")
	out := t.TempDir()
	script := filepath.Join(t.TempDir(), "keys.sh")
	if err := os.WriteFile(script, []byte(keyScript), 0o755); err != nil {
		t.Fatal(err)
	}
	e.serveArgs = []string{"--ledger", e.ledger, "--handler-exec", script, "--lease", "5s", "--concurrency", "4"}
	e.serveEnv = append(e.serveEnv, "OUT="+out)
	e.serve(t)
	e.minio(t)
	ctx := context.Background()
	keys := []string{"line1\nline2.txt", "tab\there.txt"}
	for i := range 5 {
		keys = append(keys, fmt.Sprintf("ordinary-%d.txt", i))
	}
	own := "cairn-probe/verdict.json"
	lookalike := "cairn-probe-x/y"
	for i, k := range keys {
		if i == 3 {
			for _, k := range []string{own, lookalike} {
				if _, err := e.store.PutBytes(ctx, k, []byte("x"), nil); err != nil {
					t.Fatalf("put %q: %v", k, err)
				}
			}
		}
		if _, err := e.store.PutBytes(ctx, k, []byte("data of "+k), nil); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	keys = append(keys, lookalike)
	file := func(k string) string {
		sum := sha256.Sum256([]byte(k))
		return filepath.Join(out, hex.EncodeToString(sum[:]))
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, k := range keys {
		for {
			if _, err := os.Stat(file(k) + ".env"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q was not processed in 90s (a refused event stalls MinIO's queue)", k)
			}
			time.Sleep(50 * time.Millisecond)
		}
		env, err := os.ReadFile(file(k) + ".env")
		if err != nil || string(env) != k {
			t.Errorf("CAIRN_KEY for %q: %q %v", k, env, err)
		}
		data, err := os.ReadFile(file(k) + ".json")
		var payload struct {
			Key string `json:"key"`
		}
		if err != nil || json.Unmarshal(data, &payload) != nil || payload.Key != k {
			t.Errorf("the JSON for %q names key %q (%v): %s", k, payload.Key, err, data)
		}
	}
	// The probe's object was delivered (MinIO sends in order, and a later
	// upload was processed) and skipped: counted, never handled.
	if _, err := os.Stat(file(own) + ".env"); err == nil {
		t.Errorf("the handler ran for cairn's own object %s", own)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", e.port))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `cairn_intake_own_objects_skipped_total{prefix="cairn-probe/"} 1`) {
		t.Errorf("the skipped probe object is not counted:\n%s", grepLines(string(m), "own_objects"))
	}
}

// TestServeMinIORefusalDoesNotStall: a message the webhook cannot accept
// (here a body over --max-body: the event of a 953-byte key) is answered
// 2xx and kept as a dead letter, so MinIO's queue_dir moves on and the
// uploads after it are processed; the dead letter is on the status API with
// its reason. (A 413 would be retried by MinIO for ever, every later event of
// the bucket waiting behind it.)
func TestServeMinIORefusalDoesNotStall(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "0")
	out := t.TempDir()
	script := filepath.Join(t.TempDir(), "keys.sh")
	if err := os.WriteFile(script, []byte(keyScript), 0o755); err != nil {
		t.Fatal(err)
	}
	e.serveArgs = []string{"--ledger", e.ledger, "--handler-exec", script, "--lease", "5s", "--max-body", "2600"}
	e.serveEnv = append(e.serveEnv, "OUT="+out)
	e.serve(t)
	e.minio(t)
	ctx := context.Background()
	long := strings.Repeat(strings.Repeat("x", 190)+"/", 5) + "end" // MinIO takes up to 255 bytes a segment
	keys := []string{long}
	for i := range 4 {
		keys = append(keys, fmt.Sprintf("after-%d.txt", i))
	}
	for _, k := range keys {
		if _, err := e.store.PutBytes(ctx, k, []byte("data"), nil); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	file := func(k string) string {
		sum := sha256.Sum256([]byte(k))
		return filepath.Join(out, hex.EncodeToString(sum[:])) + ".env"
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, k := range keys[1:] {
		for {
			if _, err := os.Stat(file(k)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q, uploaded after a refused event, was not processed in 90s: the refusal stalls MinIO's queue", k)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := os.Stat(file(long)); err == nil {
		t.Fatal("the handler ran for the refused event")
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v1/status", e.port))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Dead []struct {
			Bucket    string `json:"bucket"`
			Name      string `json:"event_name"`
			LastError string `json:"last_error"`
		} `json:"dead"`
		Refusals []struct {
			Reason string `json:"reason"`
			Count  int    `json:"count"`
		} `json:"refusals"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Dead) != 1 || st.Dead[0].Bucket != "cairn:refused" || st.Dead[0].Name != "cairn:Refused:TooLarge" ||
		!strings.Contains(st.Dead[0].LastError, "larger than the limit of 2600 bytes") || len(st.Refusals) != 1 || st.Refusals[0].Reason != "TooLarge" {
		t.Fatalf("status API: %+v %v, want the refused event as a dead letter with its reason, and the refusal listed", st, err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
