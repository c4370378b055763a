package kafkasrc_test

import (
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/intake/kafkasrc"
)

// FuzzFromURL: any --source string is refused with an error or gives a Kafka
// source; never a panic, never a source for another scheme.
func FuzzFromURL(f *testing.F) {
	for _, s := range []string{"kafka://127.0.0.1:9092,127.0.0.1:9093?topic=t&group=g", "kafka://h?group=g", "kafka://",
		"nats://h?stream=S", "kafka://h?topic=t&colour=red", "kafka://%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		src, err := kafkasrc.FromURL(t.Context(), raw, nil)
		if err != nil {
			return
		}
		if src.Name() != "kafka" || !strings.HasPrefix(strings.ToLower(raw), "kafka://") {
			t.Fatalf("%q accepted as a %s source", raw, src.Name())
		}
	})
}
