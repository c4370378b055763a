module github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work

go 1.26.0

require github.com/cairn-s3/cairn v0.0.0

// The ledger's schema and SQL come from cairn's own source (internal/sqlschema).
replace github.com/cairn-s3/cairn => ../../../../../..