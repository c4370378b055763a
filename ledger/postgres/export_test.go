package postgres

// SchemaVersion is the schema version this package migrates to.
func SchemaVersion() int { return len(migrations) }
