package intake

import "time"

// Yielded reports whether p's dispatcher waits for the record loop to idle.
func Yielded(p *Pipeline) bool { return p.yielded.Load() }

// SetMaxYield sets the longest p's dispatcher yields to a busy record loop
// (maxYield by default); call it before Run.
func SetMaxYield(p *Pipeline, d time.Duration) { p.maxYield = d }
