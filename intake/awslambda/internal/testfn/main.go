// Command testfn is the Lambda function the adapter's tests run under AWS's
// Runtime Interface Emulator: package awslambda around a handler whose
// behaviour each key chooses, recording every run.
//
// Environment: TESTFN_LEDGER (a ledger URL), TESTFN_STORE (an objstore URL
// the handler writes fenced outputs to), TESTFN_RUNS (a directory: one line
// "key token pid" appended per run to runs.log), and the AWS variables the
// URLs need.
//
// Keys: "hang/…" blocks, ignoring its context, on its first attempt (token
// 1): Lambda's timeout then kills the process mid-handler; "crash/…" exits
// the process 200ms into its first attempt; "slow/…" sleeps 300ms; anything else
// writes out/KEY to the store, fenced with its token.
package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/ledger"
	_ "github.com/cairn-s3/cairn/ledger/dynamoledger"
	_ "github.com/cairn-s3/cairn/ledger/objledger"
	_ "github.com/cairn-s3/cairn/ledger/postgres"
	"github.com/cairn-s3/cairn/objstore"
	_ "github.com/cairn-s3/cairn/objstore/s3store"
)

func main() {
	ctx := context.Background()
	log.SetFlags(0)
	l, err := ledger.Open(ctx, os.Getenv("TESTFN_LEDGER"), nil)
	if err != nil {
		log.Fatal(err)
	}
	s, err := objstore.Open(ctx, os.Getenv("TESTFN_STORE"), nil)
	if err != nil {
		log.Fatal(err)
	}
	runs, err := os.OpenFile(filepath.Join(os.Getenv("TESTFN_RUNS"), "runs.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		key := w.Event.Key
		fmt.Fprintf(runs, "%s %d %d\n", key, w.Token, os.Getpid())
		switch {
		case strings.HasPrefix(key, "hang/") && w.Attempt == 1:
			select {} // a handler that ignores its context
		case strings.HasPrefix(key, "crash/") && w.Attempt == 1:
			time.Sleep(200 * time.Millisecond) // mid-handler
			os.Exit(3)
		case strings.HasPrefix(key, "slow/"):
			time.Sleep(300 * time.Millisecond)
		}
		if _, err := fence.PutBytes(ctx, s, "out/"+key, fmt.Appendf(nil, "token %d", w.Token), w.Token, nil); err != nil {
			return "", err
		}
		return "written", nil
	})
	f, err := awslambda.New(l, h, &awslambda.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(f.Start())
}
