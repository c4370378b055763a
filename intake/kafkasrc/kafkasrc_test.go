package kafkasrc_test

import (
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/intake/kafkasrc"
)

func TestFromURL(t *testing.T) {
	if s, err := kafkasrc.FromURL(t.Context(), "kafka://b1:9092,b2:9092?topic=minio-events&group=cairn", nil); err != nil || s.Name() != "kafka" {
		t.Fatalf("good URL: %v", err)
	}
	for raw, hint := range map[string]string{
		"kafka://b1:9092":                    "topic=",
		"kafka://b1:9092?topic=t&colour=red": "unknown parameter",
		"nats://b1:9092?topic=t":             "kafka://",
		"kafka://?topic=t":                   "kafka://",
	} {
		if _, err := kafkasrc.FromURL(t.Context(), raw, nil); err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("%q: %v, want an error mentioning %q", raw, err, hint)
		}
	}
}
