package web

import (
	"crypto/rand"
	"sync"
	"time"
)

// flashes are the messages the server sets for the page to show after a form
// action, by random id (/?flash=ID): the page shows nothing else, so a link
// cannot make it say what the server did not. A message is kept flashTTL
// (the page refreshes itself, and may show it a few times); at most
// maxFlashes are kept, the oldest going first.
type flashes struct {
	mu sync.Mutex
	m  map[string]flash
}

type flash struct {
	msg   string
	until time.Time
}

const (
	flashTTL   = time.Minute
	maxFlashes = 256
)

func newFlashes() *flashes { return &flashes{m: map[string]flash{}} }

// put stores msg and returns its id.
func (f *flashes) put(msg string) string {
	id, now := rand.Text(), time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire(now)
	f.m[id] = flash{msg: msg, until: now.Add(flashTTL)}
	return id
}

// expire drops expired messages, then the oldest until there is room for one.
func (f *flashes) expire(now time.Time) {
	for id, m := range f.m {
		if !now.Before(m.until) {
			delete(f.m, id)
		}
	}
	for len(f.m) >= maxFlashes {
		var oldest string
		for id, m := range f.m {
			if oldest == "" || m.until.Before(f.m[oldest].until) {
				oldest = id
			}
		}
		delete(f.m, oldest)
	}
}

// get returns the message stored under id, or "" for an unknown or expired id.
func (f *flashes) get(id string) string {
	if id == "" {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.m[id]
	if !ok || !time.Now().Before(m.until) {
		return ""
	}
	return m.msg
}
