// Command cairn makes S3 and S3-compatible object stores safe as the shared
// source of truth for many writers and for event-driven pipelines. Run
// `cairn help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/internal/cli"
)

func main() {
	intake.WatchdogMain() // serves as the exec handlers' watchdog when started as one
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
