package natssrc_test

import (
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/intake/natssrc"
)

func TestFromURL(t *testing.T) {
	if s, err := natssrc.FromURL(t.Context(), "nats://user:pw@127.0.0.1:4222?stream=MINIO&subject=minio.events&durable=cairn&batch=64", nil); err != nil || s.Name() != "nats" {
		t.Fatalf("good URL: %v", err)
	}
	for raw, hint := range map[string]string{
		"nats://127.0.0.1:4222":                          "stream=",
		"nats://127.0.0.1:4222?stream=S&colour=red":      "unknown parameter",
		"nats://127.0.0.1:4222?stream=S&batch=0":         "positive",
		"kafka://127.0.0.1:4222?stream=S":                "nats://",
		"nats:///nohost?stream=S":                        "nats://",
		"nats://127.0.0.1:4222?stream=S&batch=many%20of": "positive",
	} {
		if _, err := natssrc.FromURL(t.Context(), raw, nil); err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("%q: %v, want an error mentioning %q", raw, err, hint)
		}
	}
}
