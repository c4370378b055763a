//go:build unix

// Command services starts the real servers cairn's tests use — the S3 servers
// MinIO, versitygw, gofakes3 and SeaweedFS (each built once from the Go module
// proxy at a pinned version, cached) and Ceph's RADOS Gateway (a one-node
// cluster from Debian's packages), PostgreSQL (the machine's binaries) and dynalite
// (the DynamoDB API on the machine's Node, npm-installed once into the cache)
// — on free 127.0.0.1 ports with temporary data. It also builds AWS's Lambda
// Runtime Interface Emulator into the cache and exports its path
// (CAIRN_TEST_LAMBDA_RIE); it starts none: each Lambda test runs its own.
//
//	go run ./internal/testing/cmd/services run [--no-postgres] -- CMD ARGS…
//	    start both, run CMD with CAIRN_TEST_* set, stop both (the test entry point)
//	eval "$(go run ./internal/testing/cmd/services start [--ttl 8h])"
//	    start both in the background for a developer shell; prints export lines
//	go run ./internal/testing/cmd/services stop
//	go run ./internal/testing/cmd/services install
//	    build the S3 servers and the Lambda emulator and install dynalite into
//	    the cache if they are not there yet
//
// Servers started by run die with it; servers started by start belong to a
// detached supervisor that stops them on `stop`, after --ttl, or when killed.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/services"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "install":
		err = ensureAll(context.Background())
	case "run":
		err = runCmd(os.Args[2:])
	case "start":
		err = startCmd(os.Args[2:])
	case "supervise":
		err = superviseCmd(os.Args[2:])
	case "stop":
		err = stopCmd(os.Args[2:])
	default:
		usage()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "services:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: services install | run [--no-postgres] -- CMD ARGS… | start [--ttl DUR] [--no-postgres] | stop")
	os.Exit(2)
}

// ensure returns the named S3 server's (or the Lambda emulator's) binary,
// building it into the cache if needed.
func ensure(ctx context.Context, name string) (string, error) {
	bin, ok := services.Binary(name)
	if ok {
		return bin, nil
	}
	switch name {
	case "ceph":
		return "", fmt.Errorf("ceph is not installed: apt-get install %s (the README's test command does)", strings.Join(services.CephPackages, " "))
	case "seaweedfs":
		fmt.Fprintf(os.Stderr, "services: building seaweedfs (%s) into %s once (about 11 minutes on 2 cores)\n", services.SeaweedFSModule, filepath.Dir(bin))
		if err := services.BuildSeaweedFS(ctx, bin, os.Stderr); err != nil {
			return "", err
		}
		return bin, nil
	}
	mod := services.Module(name)
	fmt.Fprintf(os.Stderr, "services: building %s (%s) into %s once\n", name, mod, filepath.Dir(bin))
	cmd := exec.CommandContext(ctx, "go", "install", mod)
	flags := "-buildvcs=false"
	if name == services.LambdaRIEName {
		flags += " -mod=mod"
	}
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(bin), "GOFLAGS="+flags, "CGO_ENABLED=0")
	cmd.Dir = os.TempDir() // outside any module
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	if _, ok := services.Binary(name); !ok {
		return "", fmt.Errorf("go install succeeded but %s is missing", bin)
	}
	return bin, nil
}

// ensureAll builds every S3 server and the Lambda emulator that are not in
// the cache yet, in parallel, and installs dynalite.
func ensureAll(ctx context.Context) error {
	names := []string{services.LambdaRIEName}
	for _, srv := range services.S3Servers {
		names = append(names, srv.Name)
	}
	errs := make(chan error, len(names)+1)
	go func() {
		_, err := services.InstallDynalite(ctx, os.Stderr)
		errs <- err
	}()
	for _, name := range names {
		go func() {
			_, err := ensure(ctx, name)
			errs <- err
		}()
	}
	var first error
	for range len(names) + 1 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

type started struct {
	s3   map[string]*services.Server
	pg   *services.Server
	dyn  *services.Server
	dirs []string
}

func (s *started) stop() {
	for _, srv := range s.s3 {
		srv.Stop()
	}
	s.pg.Stop()
	s.dyn.Stop()
	for _, d := range s.dirs {
		os.RemoveAll(d)
	}
}

// env is what tests read: CAIRN_TEST_S3_* for MinIO (the default S3 server),
// CAIRN_TEST_<NAME>_* for the others, CAIRN_TEST_POSTGRES_URL,
// CAIRN_TEST_DYNAMODB_ENDPOINT and CAIRN_TEST_LAMBDA_RIE (the emulator's
// path; tests start it themselves).
func (s *started) env() []string {
	var e []string
	if bin, ok := services.LambdaRIEBinary(); ok {
		e = append(e, "CAIRN_TEST_LAMBDA_RIE="+bin)
	}
	for _, srv := range services.S3Servers {
		x, ok := s.s3[srv.Name]
		if !ok {
			continue
		}
		p := "CAIRN_TEST_" + strings.ToUpper(srv.Name) + "_"
		if srv.Name == "minio" {
			p = "CAIRN_TEST_S3_"
		}
		e = append(e, p+"ENDPOINT="+x.URL, p+"ACCESS_KEY="+x.AccessKey, p+"SECRET_KEY="+x.SecretKey)
	}
	if s.pg != nil {
		e = append(e, "CAIRN_TEST_POSTGRES_URL="+s.pg.URL)
	}
	if s.dyn != nil {
		e = append(e, "CAIRN_TEST_DYNAMODB_ENDPOINT="+s.dyn.URL)
	}
	return e
}

func startAll(ctx context.Context, withPG bool, o services.Options) (*started, error) {
	if err := ensureAll(ctx); err != nil {
		return nil, err
	}
	st := &started{s3: map[string]*services.Server{}}
	// In parallel: Ceph takes about 15 s to come up, SeaweedFS 5 s.
	type result struct {
		name string
		srv  *services.Server
		dir  string
		err  error
	}
	results := make(chan result, len(services.S3Servers))
	for _, srv := range services.S3Servers {
		go func() {
			bin, _ := services.Binary(srv.Name)
			dir, err := os.MkdirTemp("", "cairn-"+srv.Name+"-")
			if err != nil {
				results <- result{name: srv.Name, err: err}
				return
			}
			so := o
			so.DataDir = dir
			x, err := services.StartS3(ctx, srv.Name, bin, so)
			results <- result{srv.Name, x, dir, err}
		}()
	}
	var first error
	for range services.S3Servers {
		r := <-results
		if r.dir != "" {
			st.dirs = append(st.dirs, r.dir)
		}
		if r.err != nil && first == nil {
			first = fmt.Errorf("starting %s: %w", r.name, r.err)
		}
		if r.srv != nil {
			st.s3[r.name] = r.srv
		}
	}
	if first != nil {
		st.stop()
		return nil, first
	}
	cli, _ := services.DynaliteCLI()
	ddir, err := os.MkdirTemp("", "cairn-dynalite-")
	if err != nil {
		st.stop()
		return nil, err
	}
	st.dirs = append(st.dirs, ddir)
	do := o
	do.DataDir = ddir
	if st.dyn, err = services.StartDynalite(ctx, cli, do); err != nil {
		st.stop()
		return nil, err
	}
	if withPG {
		pdir, err := os.MkdirTemp("", "cairn-pg-")
		if err != nil {
			st.stop()
			return nil, err
		}
		st.dirs = append(st.dirs, pdir)
		po := o
		po.DataDir = pdir
		var err2 error
		if st.pg, err2 = services.StartPostgres(ctx, services.PostgresBinDir, po); err2 != nil {
			st.stop()
			return nil, err2
		}
	}
	return st, nil
}

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	noPG := fs.Bool("no-postgres", false, "do not start PostgreSQL")
	_ = fs.Parse(args)
	rest := fs.Args()
	if len(rest) == 0 {
		usage()
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	st, err := startAll(ctx, !*noPG, services.Options{DieWithParent: true})
	if err != nil {
		return err
	}
	defer st.stop()
	for _, kv := range st.env() {
		fmt.Fprintln(os.Stderr, "services:", kv)
	}
	cmd := exec.Command(rest[0], rest[1:]...)
	cmd.Env = append(os.Environ(), st.env()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}()
	return cmd.Wait()
}

func stateDir() string { return filepath.Join(services.CacheDir(), "dev-services") }

func startCmd(args []string) error {
	fs := flag.NewFlagSet("start", flag.ExitOnError)
	ttl := fs.Duration("ttl", 8*time.Hour, "stop the servers by themselves after this long")
	noPG := fs.Bool("no-postgres", false, "do not start PostgreSQL")
	_ = fs.Parse(args)
	if pid, ok := supervisorPID(); ok {
		return fmt.Errorf("dev services already running (supervisor pid %d); run `stop` first", pid)
	}
	if err := ensureAll(context.Background()); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "supervise", "--ttl", ttl.String(), "--no-postgres="+strconv.FormatBool(*noPG))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			fmt.Fprintf(os.Stderr, "services: running under supervisor pid %d; they stop after %s or on `stop`\n", cmd.Process.Pid, ttl)
			return cmd.Process.Release()
		}
		fmt.Println(line)
	}
	_ = cmd.Wait()
	return errors.New("the supervisor exited before the servers were ready")
}

func superviseCmd(args []string) error {
	fs := flag.NewFlagSet("supervise", flag.ExitOnError)
	ttl := fs.Duration("ttl", 8*time.Hour, "")
	noPG := fs.Bool("no-postgres", false, "")
	_ = fs.Parse(args)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	st, err := startAll(ctx, !*noPG, services.Options{DieWithParent: true})
	if err != nil {
		return err
	}
	defer st.stop()
	if err := os.MkdirAll(stateDir(), 0o755); err != nil {
		return err
	}
	pidFile := filepath.Join(stateDir(), "supervisor.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile)
	for _, kv := range st.env() {
		fmt.Println("export " + kv)
	}
	fmt.Printf("export AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s AWS_REGION=us-east-1\n", st.s3["minio"].AccessKey, st.s3["minio"].SecretKey)
	fmt.Println("ready")
	os.Stdout.Close()
	// Detach from the terminal's output entirely.
	if devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		os.Stdout, os.Stderr = devnull, devnull
	}
	select {
	case <-ctx.Done():
	case <-time.After(*ttl):
	}
	return nil
}

func supervisorPID() (int, bool) {
	data, err := os.ReadFile(filepath.Join(stateDir(), "supervisor.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	return pid, true
}

func stopCmd([]string) error {
	pid, ok := supervisorPID()
	if !ok {
		fmt.Fprintln(os.Stderr, "services: nothing running")
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			fmt.Fprintln(os.Stderr, "services: stopped")
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("supervisor %d did not stop", pid)
}
