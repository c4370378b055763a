package natssrc_test

import (
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/intake/natssrc"
)

// FuzzFromURL: any --source string is refused with an error or gives a NATS
// source; never a panic, never a source for another scheme.
func FuzzFromURL(f *testing.F) {
	for _, s := range []string{"nats://127.0.0.1:4222?stream=S&subject=x.y&durable=d&batch=8", "nats://u:p@h:1?stream=S",
		"nats://h?batch=-1&stream=S", "nats://", "kafka://h?topic=t", "nats://h?stream=S&colour=red", "nats://%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		src, err := natssrc.FromURL(t.Context(), raw, nil)
		if err != nil {
			return
		}
		if src.Name() != "nats" || !strings.HasPrefix(strings.ToLower(raw), "nats://") {
			t.Fatalf("%q accepted as a %s source", raw, src.Name())
		}
	})
}
