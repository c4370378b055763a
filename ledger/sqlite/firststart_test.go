package sqlite_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

const envFirstStartPath = "CAIRN_SQLITE_FIRST_START_PATH"

// The child opens the ledger at $CAIRN_SQLITE_FIRST_START_PATH once its
// stdin closes (all children are released at once) and exits 0 if it could.
func init() {
	testenv.RegisterChild("sqlite-first-start", func() int {
		_, _ = io.Copy(io.Discard, os.Stdin)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l, err := sqlite.Open(ctx, os.Getenv(envFirstStartPath), nil)
		if err == nil {
			err = l.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	})
}

// TestConcurrentFirstStart starts several processes that open one fresh
// ledger file at the same moment, several times: every one of them opens it
// (creating the file, switching it to WAL and migrating the schema are
// serialised between processes by SQLite's locks and busy_timeout).
func TestConcurrentFirstStart(t *testing.T) {
	t.Parallel()
	const trials, procs = 5, 4
	for trial := range trials {
		path := filepath.Join(t.TempDir(), "ledger.db")
		var release []io.Closer
		type child struct {
			wait   func() error
			stderr *bytes.Buffer
		}
		var children []child
		for range procs {
			cmd := testenv.Child(t, "sqlite-first-start", envFirstStartPath+"="+path)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			release = append(release, in)
			children = append(children, child{cmd.Wait, &stderr})
		}
		for _, in := range release {
			in.Close()
		}
		for i, c := range children {
			if err := c.wait(); err != nil {
				t.Fatalf("trial %d: process %d of %d opening a fresh ledger at once: %v: %s", trial, i+1, procs, err, c.stderr)
			}
		}
	}
}
