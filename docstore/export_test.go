package docstore

// Queued reports how many updates of key wait in its group-commit queue and
// whether a committer runs for it (tests: an update queued before they go on).
func Queued(d *Store, key string) (queued int, running bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.batchers[key]
	if b == nil {
		return 0, false
	}
	return len(b.queue), b.running
}
