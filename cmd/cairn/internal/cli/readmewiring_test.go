package cli_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
)

// readmeBlock is the README's sh code block that contains marker.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, marker) {
			return block
		}
	}
	t.Fatalf("no sh block in the README holds %q", marker)
	return ""
}

// TestReadmeMinIOWiringWithoutMC runs the README's aws s3api wiring against
// MinIO as written (endpoint and bucket swapped for the test's): MinIO takes
// the configuration, announces an upload under the prefix to the webhook
// target, and never one of cairn's own objects outside it.
func TestReadmeMinIOWiringWithoutMC(t *testing.T) {
	t.Parallel()
	aws, err := exec.LookPath("aws")
	if err != nil {
		t.Skip("no aws CLI on this machine: the README's command cannot be run as written")
	}
	var mu sync.Mutex
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}))
	defer hook.Close()
	ep := testenv.OwnMinIO(t, "MINIO_NOTIFY_WEBHOOK_ENABLE_CAIRN=on", "MINIO_NOTIFY_WEBHOOK_ENDPOINT_CAIRN="+hook.URL)
	b, url := testenv.NewBucket(t, ep)
	u, _ := objstore.ParseURL(url)
	cmd := readmeBlock(t, "put-bucket-notification-configuration")
	cmd = strings.Replace(cmd, "http://minio-host:9000", ep.URL, 1)
	cmd = strings.Replace(cmd, "--bucket uploads", "--bucket "+u.Host, 1)
	c := exec.Command("sh", "-c", strings.Replace(cmd, "aws ", aws+" ", 1))
	c.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+ep.AccessKey, "AWS_SECRET_ACCESS_KEY="+ep.SecretKey, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("the README's command: %v\n%s\n%s", err, cmd, out)
	}
	s := objstore.New(b, nil)
	ctx := context.Background()
	for _, k := range []string{"cairn-locks/tree/x", "cairn-probe/y", "incoming/a.jpg"} {
		if _, err := s.Put(ctx, k, strings.NewReader("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		all := strings.Join(got, "\n")
		mu.Unlock()
		if strings.Contains(all, "incoming%2Fa.jpg") || strings.Contains(all, "incoming/a.jpg") {
			if strings.Contains(all, "cairn-locks") || strings.Contains(all, "cairn-probe") {
				t.Fatalf("an event of cairn's own objects was sent:\n%s", all)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event for incoming/a.jpg in 30s; got:\n%s", all)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
