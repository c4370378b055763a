// Command modernc runs one sqlitedrivers workload on modernc.org/sqlite.
package main

import (
	_ "modernc.org/sqlite"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work"
)

func main() { work.Main("modernc", "sqlite") }
