// Package cli implements the cairn command line (cobra). Every command writes
// to injected writers, takes a *slog.Logger, and has --json output where it has
// output at all.
//
// Exit codes: 0 success; 1 runtime error; 2 usage error (bad flags, URLs,
// keys); 3 a precondition was not met or a lock was not acquired in time;
// 4 a lease was lost while a command ran; 130 interrupted by Ctrl-C (SIGINT),
// 143 stopped by SIGTERM (see Signalled). Errors go to stderr as one line that
// says what to do next.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/policy"
	// Store backends, linked in for their URL schemes.
	_ "github.com/cairn-s3/cairn/objstore/fsstore"
	_ "github.com/cairn-s3/cairn/objstore/mem"
	_ "github.com/cairn-s3/cairn/objstore/s3store"
)

// Exit codes.
const (
	ExitOK           = 0
	ExitRuntime      = 1
	ExitUsage        = 2
	ExitPrecondition = 3
	ExitLeaseLost    = 4
)

// Version is set at build time with -ldflags "-X github.com/cairn-s3/cairn/cmd/cairn/internal/cli.Version=…".
var Version = "dev"

// usageError marks errors that are the caller's to fix (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// env carries what every command needs.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	log            *slog.Logger
	json           bool
	level          slog.Level
}

// logger logs at lvl to stderr: text on a terminal, JSON otherwise. Durations
// are written as Go durations ("30s"), not nanoseconds, in both.
func (e *env) logger(lvl slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	if isTerminal(e.stderr) {
		return slog.New(slog.NewTextHandler(e.stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(e.stderr, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// serialized makes w safe for the writers a command runs at once: its logger
// and, for a writer that is not a file, the goroutine os/exec runs to copy a
// child's output into it (lock run's child writes to cairn's stderr). Files go
// to children as they are, and the kernel orders their writes.
func serialized(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok || w == nil {
		return w
	}
	return &syncWriter{w: w}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Main runs the cairn command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	stdout, stderr = serialized(stdout), serialized(stderr)
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "cairn",
		Short:         "Make S3 and S3-compatible stores safe for many writers and event pipelines",
		Long:          "cairn makes S3 and S3-compatible object stores safe as the shared source of truth for many writers and for event-driven pipelines.\n\nStore URLs: s3://bucket/prefix?endpoint=URL&region=R&path_style=true, file:///abs/dir, a directory path, mem://name.\nS3 credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, roles, …).\n\nExit codes: 0 ok, 1 runtime error, 2 usage error, 3 precondition not met / not acquired in time, 4 lease lost, 130 interrupted (Ctrl-C), 143 stopped by SIGTERM.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion().Version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// A command with --config (cairn serve) also takes its settings,
			// the global ones (--log-level, --json) included, from CAIRN_*
			// variables and the file: through the flags' own parsing, and
			// before anything is logged.
			if f := cmd.Flags().Lookup("config"); f != nil {
				if err := applyEnvAndConfig(cmd, f.Value.String()); err != nil {
					return err
				}
			}
			e.log = e.logger(e.level)
			return nil
		},
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().BoolVar(&e.json, "json", false, "machine-readable JSON output")
	e.level = slog.LevelWarn
	root.PersistentFlags().Var((*levelFlag)(&e.level), "log-level", "log level: debug, info, warn, error")
	var cpuProfile string
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to this file")
	_ = root.PersistentFlags().MarkHidden("cpuprofile")
	defer func() {
		if cpuProfile != "" {
			pprof.StopCPUProfile()
		}
	}()
	root.PersistentPreRunE = chainPreRun(root.PersistentPreRunE, func() error {
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return usagef("--cpuprofile: %v", err)
		}
		return pprof.StartCPUProfile(f)
	})
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(probeCmd(e), docCmd(e), putCmd(e), policyCmd(e), lockCmd(e), ledgerCmd(e), replayCmd(e), auditCmd(e), fsCmd(e), serveCmd(e), lambdaCmd(e), demoCmd(e), benchCmd(e), versionCmd(e))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	typeArgErrors(root)

	err := findCommand(root, args)
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	var sig Signalled
	signalled := errors.As(context.Cause(ctx), &sig)
	if err == nil {
		if signalled && sig.Code() == ExitInterrupted {
			return ExitInterrupted // Ctrl-C: stopped by the user, however cleanly
		}
		return ExitOK // a clean stop on SIGTERM (serve) is a success
	}
	code := exitCode(err)
	var xe exitError
	if errors.As(err, &xe) {
		return xe.code // the command's own status: it has spoken for itself
	}
	if signalled && ctx.Err() != nil {
		code = sig.Code()
	}
	err = forCLI(err)
	msg := err.Error()
	if e.log != nil {
		if d := objstore.Detail(err); d != "" {
			e.log.Debug("the error in full", "detail", d)
		}
	}
	if code == ExitUsage && !strings.Contains(msg, "cairn help") {
		msg += " (see 'cairn help')"
	}
	msg = strings.ReplaceAll(msg, "\n", " ")
	if e.json { // encoding/json escapes what a terminal would obey
		b, _ := json.Marshal(map[string]any{"error": msg, "exit_code": code})
		fmt.Fprintln(stderr, string(b))
		return code
	}
	fmt.Fprintln(stderr, "cairn: "+safetext.Escape(msg)) // keys in errors are data others control
	return code
}

// levelFlag is --log-level: it validates when set, so a bad value from a
// flag, CAIRN_LOG_LEVEL or a config file is refused the same way.
type levelFlag slog.Level

func (l *levelFlag) String() string { return strings.ToLower((*slog.Level)(l).String()) }
func (l *levelFlag) Type() string   { return "level" }
func (l *levelFlag) Set(v string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(v)); err != nil {
		return fmt.Errorf("%q is not a log level: use debug, info, warn or error", v)
	}
	*l = levelFlag(lvl)
	return nil
}

func chainPreRun(first func(*cobra.Command, []string) error, then func() error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := first(cmd, args); err != nil {
			return err
		}
		return then()
	}
}

// ExitInterrupted is the exit code after Ctrl-C (128 + SIGINT); SIGTERM
// gives 143.
const ExitInterrupted = 130

// Signalled is the cause (context.Cause) with which Main's caller cancels
// its context when the process gets a signal. A command that then fails —
// or, for SIGINT, any command — exits 128 + the signal's number: 130 for
// SIGINT, 143 for SIGTERM. A command that ends cleanly on SIGTERM exits 0.
type Signalled struct{ Signal os.Signal }

func (s Signalled) Error() string { return "interrupted by " + s.Signal.String() }

// Code is 128 + the signal's number (130 when unknown).
func (s Signalled) Code() int {
	if sn, ok := s.Signal.(syscall.Signal); ok {
		return 128 + int(sn)
	}
	return ExitInterrupted
}

// typeArgErrors makes every argument error of cmd and its subcommands a
// usageError at its source: each command's Args validator (cobra.ExactArgs
// and the like, or our own) is wrapped. Unknown commands are findCommand's;
// flag errors go through root's FlagErrorFunc.
func typeArgErrors(cmd *cobra.Command) {
	if validate := cmd.Args; validate != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := validate(c, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		typeArgErrors(c)
	}
}

// findCommand is cobra's own lookup of the command args name, run first so
// that an unknown command is a usageError: cobra's error for one under the
// root (with its suggestions), and ours for one under a group such as
// `cairn bench`, which cobra would answer with the group's help and status 0.
// Execute looks the command up again, the same way.
func findCommand(root *cobra.Command, args []string) error {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return nil // shell completion: Execute adds and runs its hidden command
	}
	c, rest, err := root.Find(args)
	if err != nil {
		return usageError{err}
	}
	if c == root || c.Runnable() || !c.HasSubCommands() {
		return nil
	}
	// A group: its only flags are the global ones, so parsing them here
	// (again in Execute) changes nothing; a flag error is Execute's to report.
	if c.ParseFlags(rest) == nil && c.Flags().NArg() > 0 {
		return usagef("unknown command %q for %q", c.Flags().Arg(0), c.CommandPath())
	}
	return nil
}

// sentinelExits maps the sentinel errors of cairn's packages to exit codes:
// with exitCode's typed errors (usageError, folder.ConflictError), the one
// place where an error's kind becomes the process's status. The first match
// wins. Commands wrap sentinels (%w) and do not choose 2, 3 or 4 themselves,
// except usageError for their own checks of flags and arguments.
var sentinelExits = []struct {
	err  error
	code int
}{
	{objstore.ErrInvalidURL, ExitUsage},
	{objstore.ErrInvalidKey, ExitUsage},
	{ledger.ErrInvalidURL, ExitUsage},
	{pathlock.ErrBadPath, ExitUsage},
	{folder.ErrInvalid, ExitUsage},
	{folder.ErrReserved, ExitUsage},
	{lease.ErrLeaseLost, ExitLeaseLost},
	{treelock.ErrSessionLost, ExitLeaseLost},
	{objstore.ErrPreconditionFailed, ExitPrecondition},
	{fence.ErrStale, ExitPrecondition},
	{fence.ErrFenced, ExitPrecondition},
	{lease.ErrNotAcquired, ExitPrecondition},
	{lease.ErrNotHeld, ExitPrecondition},
	{treelock.ErrNoSession, ExitPrecondition},
	{treelock.ErrNotAcquired, ExitPrecondition},
	{folder.ErrNotEmpty, ExitPrecondition},
	{policy.ErrDenied, ExitUsage},
}

func exitCode(err error) int {
	var ue usageError
	var xe exitError
	var ce *folder.ConflictError
	switch {
	case errors.As(err, &xe):
		return xe.code
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ce):
		return ExitPrecondition
	}
	for _, s := range sentinelExits {
		if errors.Is(err, s.err) {
			return s.code
		}
	}
	return ExitRuntime
}

func (e *env) writeJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	return enc.Encode(v)
}

// openStore opens the store at raw; a bad URL (objstore.ErrInvalidURL)
// exits 2.
func openStore(ctx context.Context, raw string) (*objstore.Store, error) {
	return objstore.Open(ctx, raw, nil)
}

func versionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print cairn's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := buildVersion()
			if e.json {
				return e.writeJSON(v)
			}
			line := "cairn " + v.Version
			if v.Commit != "" {
				line += " (commit " + v.Commit
				if v.Modified {
					line += ", modified"
				}
				line += ")"
			}
			_, err := fmt.Fprintln(e.stdout, line+" "+v.Go)
			return err
		},
	}
}

// versionInfo is what `cairn version` reports.
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// buildVersion reads the module version (set by `go install …@vX`), the VCS
// commit (set by `go build` in a checkout) and the Go version from the
// binary's build info; -ldflags "-X …cli.Version=…" overrides the version.
func buildVersion() versionInfo {
	v := versionInfo{Version: Version, Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
			if len(v.Commit) > 12 {
				v.Commit = v.Commit[:12]
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}
