// Command cairn makes S3 and S3-compatible object stores safe as the shared
// source of truth for many writers and for event-driven pipelines. Run
// `cairn help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/intake"
)

func main() {
	intake.WatchdogMain() // serves as the exec handlers' watchdog when started as one
	// The first SIGINT or SIGTERM cancels the command's context with the
	// signal as its cause (cli.Main exits 130 or 143, after the command has
	// said what it left); a second one gets the default action, so a second
	// Ctrl-C stops at once.
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		signal.Stop(sigs)
		cancel(cli.Signalled{Signal: s})
	}()
	code := cli.Main(ctx, cli.Args(os.Args), os.Stdin, os.Stdout, os.Stderr) // a binary named bootstrap runs cairn lambda
	cancel(nil)
	os.Exit(code)
}
