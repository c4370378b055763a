package event

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzFastPath: whatever the one-pass decoder accepts, the careful parser
// accepts too, with the same events (the fast path is an optimisation, never
// a second meaning).
func FuzzFastPath(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	more, _ := filepath.Glob("testdata/*/*.json")
	for _, name := range append(files, more...) {
		data, err := os.ReadFile(name)
		if err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"a+b%2Fc","size":1,"sequencer":"0A"}}}]}`))
	f.Add([]byte(`{"Records":[{"EventSource":"aws:sns","Sns":{"Message":"{}"}}]}`))
	f.Add([]byte(`{"Records":[{"eventSource":"aws:sqs","body":"{}"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := parseFast(data)
		if !ok {
			return
		}
		pr := &parser{}
		slow, err := pr.parse(data, "", 0)
		if err == nil && len(pr.rejected) > 0 {
			err = pr.rejected[0]
		}
		if err != nil {
			t.Fatalf("fast path accepted what the careful parser rejects (%v): %q", err, data)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast and careful parsers disagree on %q:\n%+v\n%+v", data, fast, slow)
		}
	})
}
