package objledger

import "time"

// SetHintWait sets how long l's hinter waits after a wake before it writes
// the hints (hintLinger by default).
func SetHintWait(l *Backend, d time.Duration) { l.hintWait.Store(int64(d)) }
