package intake

import (
	"sync"
	"time"
)

// activity counts processed work per minute for the last hour.
type activity struct {
	mu     sync.Mutex
	counts [60]int
	minute [60]int64
}

func (a *activity) add(t time.Time) {
	m := t.Unix() / 60
	i := m % 60
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.minute[i] != m {
		a.minute[i], a.counts[i] = m, 0
	}
	a.counts[i]++
}

// last returns the counts of the 60 minutes up to now, oldest first.
func (a *activity) last(now time.Time) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]int, 60)
	cur := now.Unix() / 60
	for k := range 60 {
		m := cur - 59 + int64(k)
		if i := m % 60; a.minute[i] == m {
			out[k] = a.counts[i]
		}
	}
	return out
}

// Activity returns how much work this pipeline processed in each of the last
// 60 minutes, oldest first.
func (p *Pipeline) Activity() []int { return p.act.last(time.Now()) }
