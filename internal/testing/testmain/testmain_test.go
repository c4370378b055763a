package testmain

import (
	"strings"
	"testing"
)

// descend blocks at the bottom of n frames, deep enough that the runtime
// elides frames when it prints the goroutine.
func descend(n int, release <-chan struct{}) int {
	if n == 0 {
		<-release
		return 0
	}
	return descend(n-1, release) + 1
}

func TestFindLeaksDeepStack(t *testing.T) {
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		descend(300, release)
	}()
	err := findLeaks()
	close(release)
	<-done
	if err == nil {
		t.Fatal("a goroutine 300 frames deep was running, and no leak was reported")
	}
	if !strings.Contains(err.Error(), "descend") {
		t.Fatalf("the leak report does not name the leaked goroutine: %v", err)
	}
}

func TestFindLeaksNone(t *testing.T) {
	if err := findLeaks(); err != nil {
		t.Fatalf("no goroutine was left running, yet: %v", err)
	}
}
