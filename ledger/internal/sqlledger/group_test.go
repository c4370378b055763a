package sqlledger

import "testing"

// A queued call handed the lead just as its context ended leaves the queue
// and passes the lead on: to the next queued call, or to nobody.
func TestLeavePassesTheLeadOn(t *testing.T) {
	call := func() *logCall { return &logCall{op: opRecord, done: make(chan error, 1)} }
	g := &intakeLog{}
	a, b := call(), call()
	g.calls, g.leading = []*logCall{a, b}, true
	g.handOff() // the leader is done: a leads
	if !g.leave(a) {
		t.Fatal("a queued call could not leave")
	}
	select {
	case err := <-b.done:
		if err != errLead {
			t.Fatalf("b got %v, want the lead", err)
		}
	default:
		t.Fatal("the lead a was handed was lost")
	}
	if !g.leading || len(g.calls) != 1 || g.calls[0] != b {
		t.Fatalf("leading %v, queue %v: want b queued, leading", g.leading, g.calls)
	}
	b.done <- errLead // b is handed the lead again, and leaves too
	if !g.leave(b) || g.leading || len(g.calls) != 0 {
		t.Fatalf("after the last call left: leading %v, queue %v; want no leader", g.leading, g.calls)
	}
	// A call a leader took already cannot leave: its outcome comes.
	c := call()
	if g.leave(c) {
		t.Fatal("a call that is not queued left")
	}
}
