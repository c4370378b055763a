// Command wasm2go runs one sqlitedrivers workload on github.com/ncruces/go-sqlite3/driver.
package main

import (
	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work"
)

func main() { work.Main("wasm2go", "sqlite3") }
