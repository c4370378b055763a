// Command cgo runs one sqlitedrivers workload on github.com/mattn/go-sqlite3.
package main

import (
	_ "github.com/mattn/go-sqlite3"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work"
)

func main() { work.Main("cgo", "sqlite3") }
