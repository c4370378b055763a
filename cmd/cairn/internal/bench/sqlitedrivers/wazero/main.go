// Command wazero runs one sqlitedrivers workload on github.com/ncruces/go-sqlite3
// v0.32.0, its last release that runs SQLite's WebAssembly build in the wazero
// runtime (later releases translate the WebAssembly to Go with wasm2go: that
// is cmd/wasm2go). It is its own module because one module holds one version
// of a module.
package main

import (
	_ "github.com/ncruces/go-sqlite3/driver"
	_ "github.com/ncruces/go-sqlite3/embed"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work"
)

func main() { work.Main("wazero", "sqlite3") }
