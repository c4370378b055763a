package web

import (
	"strconv"
	"testing"
)

// TestFlashesAreBounded: the store keeps at most maxFlashes messages, the
// newest; unknown ids show nothing.
func TestFlashesAreBounded(t *testing.T) {
	t.Parallel()
	f := newFlashes()
	var ids []string
	for i := range maxFlashes + 40 {
		ids = append(ids, f.put("message "+strconv.Itoa(i)))
	}
	if len(f.m) > maxFlashes {
		t.Fatalf("%d messages kept, at most %d wanted", len(f.m), maxFlashes)
	}
	if got := f.get(ids[len(ids)-1]); got != "message "+strconv.Itoa(maxFlashes+39) {
		t.Fatalf("the newest message: %q", got)
	}
	for _, id := range []string{"", "message 1", ids[0] + "x"} {
		if got := f.get(id); got != "" {
			t.Fatalf("id %q shows %q", id, got)
		}
	}
}
