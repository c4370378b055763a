package objledger

// EveryVersion reports whether the ledger was opened with
// ledger.Options.EveryVersion (ledger.Ledger.EveryVersion asks it).
func (l *Backend) EveryVersion() bool { return l.opts.EveryVersion }
