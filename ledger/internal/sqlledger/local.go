package sqlledger

// Local reports whether the ledger lives on this machine's disk, out of
// reach of processes elsewhere: SQLite's does.
func (l *Backend) Local() bool { return l.d.Name == "sqlite" }
