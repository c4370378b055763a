module github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/wazero

go 1.26.0

require (
	github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work v0.0.0
	github.com/ncruces/go-sqlite3 v0.32.0
)

require (
	github.com/cairn-s3/cairn v0.0.0 // indirect
	github.com/ncruces/julianday v1.0.0 // indirect
	github.com/tetratelabs/wazero v1.11.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work => ../work

// The ledger's schema and SQL come from cairn's own source (internal/sqlschema).
replace github.com/cairn-s3/cairn => ../../../../../..