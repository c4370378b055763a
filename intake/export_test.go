package intake

import "time"

// Yielded reports whether p's dispatcher waits for the recorder to idle.
func Yielded(p *Pipeline) bool { return p.disp.yielded.Load() }

// SetMaxYield sets the longest p's dispatcher yields to a busy recorder
// (maxYield by default); call it before Run.
func SetMaxYield(p *Pipeline, d time.Duration) { p.disp.maxYield = d }

// SetAfterReceive makes p's recorder call f each time it has taken a batch's
// first submission off its queue, before it marks itself recording; call it
// before Run.
func SetAfterReceive(p *Pipeline, f func()) { p.rec.afterReceive = f }
