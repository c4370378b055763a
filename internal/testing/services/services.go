// Package services starts the real servers cairn's tests and developers use —
// S3 servers (MinIO, versitygw with its posix backend, gofakes3 with its memory
// backend, SeaweedFS's `weed mini`; each built once from the Go module proxy
// at a pinned version; and Ceph's RADOS Gateway on a one-node cluster from
// Debian's packages) and
// PostgreSQL for the shared ledger, and dynalite (a DynamoDB API on Node,
// installed once with npm) for the DynamoDB ledger — on free 127.0.0.1 ports with throw-away
// data directories; and AWS's Lambda Runtime Interface Emulator (built like the
// S3 servers), which each Lambda test starts for its own function
// (StartLambdaRIE, through package lambdatest). Tests start them with DieWithParent, so a killed
// test process takes its servers with it; `go run ./internal/testing/cmd/services` starts
// them for a developer shell and stops them on request.
package services

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MinIOModule is the pinned MinIO version built from the Go module proxy.
const MinIOModule = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// An S3Server is an S3 implementation the tests run: built from the Go
// module proxy (Module), or installed from Debian packages (Ceph).
type S3Server struct {
	Name   string // "minio", "versitygw", "gofakes3", "seaweedfs", "ceph"
	Module string // module path@version of its main package ("" for Ceph)
}

// S3Servers are the S3 servers the test suite proves cairn on. MinIO's
// community edition is maintenance-only (archived December 2025); versitygw,
// SeaweedFS and Ceph's RADOS Gateway are where its users go (SeaweedFS and
// Ceph RGW are also what most self-hosting enterprises run); gofakes3 is the
// emulator many Go projects test with, and enforces conditions on PutObject
// only.
var S3Servers = []S3Server{
	{"minio", MinIOModule},
	{"versitygw", "github.com/versity/versitygw/cmd/versitygw@v1.8.0"},
	{"gofakes3", "github.com/johannesboyne/gofakes3/cmd/gofakes3@v1.2.0"},
	{"seaweedfs", SeaweedFSModule},
	{"ceph", ""},
}

// S3ServerNames are the names of S3Servers, for tests that loop over them.
func S3ServerNames() []string {
	names := make([]string, len(S3Servers))
	for i, s := range S3Servers {
		names[i] = s.Name
	}
	return names
}

// Binary returns the path of the named server's binary (<CacheDir>/bin/NAME;
// $CAIRN_MINIO_BIN for MinIO, $CAIRN_TEST_LAMBDA_RIE for the Lambda emulator,
// radosgw on PATH for Ceph)
// and whether it exists.
func Binary(name string) (string, bool) {
	switch name {
	case "minio":
		return MinIOBinary()
	case LambdaRIEName:
		return LambdaRIEBinary()
	case "ceph":
		return CephBinary()
	}
	p := filepath.Join(CacheDir(), "bin", name)
	_, err := os.Stat(p)
	return p, err == nil
}

// Module returns the pinned module of the named server or of the Lambda
// emulator ("" if unknown).
func Module(name string) string {
	if name == LambdaRIEName {
		return LambdaRIEModule
	}
	for _, s := range S3Servers {
		if s.Name == name {
			return s.Module
		}
	}
	return ""
}

// StartS3 starts the named S3 server on a free loopback port (bin is unused
// for Ceph, whose programs are on PATH).
func StartS3(ctx context.Context, name, bin string, o Options) (*Server, error) {
	switch name {
	case "minio":
		return StartMinIO(ctx, bin, o)
	case "seaweedfs":
		return StartSeaweedFS(ctx, bin, o)
	case "ceph":
		return StartCeph(ctx, o)
	case "versitygw", "gofakes3":
	default:
		return nil, fmt.Errorf("unknown S3 server %q", name)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var cmd *exec.Cmd
	if name == "versitygw" {
		data := filepath.Join(o.DataDir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		cmd = exec.Command(bin, "--port", addr, "--access", "cairnadmin", "--secret", "cairnadmin-secret", "--quiet", "posix", data)
	} else {
		// gofakes3 checks no signatures: any credentials do.
		cmd = exec.Command(bin, "-backend", "memory", "-host", addr)
	}
	cmd.Env = append(os.Environ(), o.Env...)
	s, err := start(cmd, o)
	if err != nil {
		return nil, err
	}
	s.URL, s.AccessKey, s.SecretKey = "http://"+addr, "cairnadmin", "cairnadmin-secret"
	// Ready once it answers HTTP at all (an anonymous GET / is 403 on
	// versitygw, 200 on gofakes3).
	if err := waitReady(ctx, s, name, o, func() bool {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}); err != nil {
		return nil, err
	}
	return s, nil
}

func waitReady(ctx context.Context, s *Server, name string, o Options, ready func() bool) error {
	logPath := o.LogFile
	if logPath == "" {
		logPath = filepath.Join(o.DataDir, "server.log")
	}
	deadline := time.Now().Add(60 * time.Second)
	for !ready() {
		select {
		case <-s.done:
			return fmt.Errorf("%s exited during start-up: %s", name, tail(logPath))
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("%s did not become ready in 60s: %s", name, tail(logPath))
		}
	}
	return nil
}

// PostgresBinDir is where Debian's PostgreSQL 15 server binaries live.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// CacheDir is where built binaries are kept between runs: $CAIRN_CACHE_DIR, else
// the user cache dir + /cairn.
func CacheDir() string {
	if d := os.Getenv("CAIRN_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "cairn")
}

// MinIOBinary returns the path of the MinIO server binary ($CAIRN_MINIO_BIN, else
// <CacheDir>/bin/minio) and whether it exists.
func MinIOBinary() (string, bool) {
	p := os.Getenv("CAIRN_MINIO_BIN")
	if p == "" {
		p = filepath.Join(CacheDir(), "bin", "minio")
	}
	_, err := os.Stat(p)
	return p, err == nil
}

// Options for starting a server.
type Options struct {
	// DataDir holds the server's data; it must exist. Required.
	DataDir string
	// DieWithParent kills the server when the starting process dies (tests).
	DieWithParent bool
	// Detach puts the server in its own session so it outlives the starter (dev).
	Detach bool
	// LogFile receives the server's output. Default: <DataDir>/server.log.
	LogFile string
	// Env adds environment variables (e.g. MinIO notification targets).
	Env []string
	// DurablePostgres starts PostgreSQL with its default fsync=on (the test
	// servers run with fsync=off unless asked: durability is not what most
	// tests are about, and it costs seconds).
	DurablePostgres bool
}

// Server is a running server.
type Server struct {
	Cmd *exec.Cmd
	// URL: for MinIO the S3 endpoint (http://127.0.0.1:PORT); for PostgreSQL a
	// connection URL.
	URL string
	// AccessKey and SecretKey for MinIO.
	AccessKey, SecretKey string
	// RuntimeAPI is, for the Lambda emulator, the address of the Runtime API
	// its function is given (127.0.0.1:PORT).
	RuntimeAPI string
	done       chan struct{}
	// others are more processes of the same server (Ceph's monitor and
	// OSD under its gateway), stopped after Cmd, last first.
	others []*Server
}

// Exited is closed once the server's process has exited and been waited for.
func (s *Server) Exited() <-chan struct{} { return s.done }

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	if s == nil || s.Cmd == nil || s.Cmd.Process == nil {
		return
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-s.done
	}
	for i := len(s.others) - 1; i >= 0; i-- {
		s.others[i].Stop()
	}
}

// FreePort returns a currently free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(cmd *exec.Cmd, o Options) (*Server, error) {
	logPath := o.LogFile
	if logPath == "" {
		logPath = filepath.Join(o.DataDir, "server.log")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	setParentDeath(cmd.SysProcAttr, o.DieWithParent)
	setDetach(cmd.SysProcAttr, o.Detach)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	s := &Server{Cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	return s, nil
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// StartMinIO starts the MinIO binary on a free loopback port.
func StartMinIO(ctx context.Context, bin string, o Options) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cport, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", fmt.Sprintf("127.0.0.1:%d", cport), filepath.Join(o.DataDir, "data"))
	// MINIO_SYNC_BOOT: MinIO otherwise answers S3 requests while it still
	// registers the notification targets its environment configures (in a
	// goroutine after it starts serving), so a bucket notification set up
	// right away can be refused on a loaded machine with "A specified
	// destination ARN does not exist" (CI saw it for the NATS target). With it
	// on, requests wait until that start-up work is done.
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER=cairnadmin", "MINIO_ROOT_PASSWORD=cairnadmin-secret",
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI=on", "MINIO_SYNC_BOOT=on")
	cmd.Env = append(cmd.Env, o.Env...)
	s, err := start(cmd, o)
	if err != nil {
		return nil, err
	}
	s.URL, s.AccessKey, s.SecretKey = "http://"+addr, "cairnadmin", "cairnadmin-secret"
	if err := waitReady(ctx, s, "minio", o, func() bool {
		resp, err := http.Get(s.URL + "/minio/health/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// StartPostgres initialises a cluster in o.DataDir and starts PostgreSQL on a free
// loopback port. PostgreSQL refuses to run as root, so as root it runs as the
// "postgres" user (or "nobody").
func StartPostgres(ctx context.Context, binDir string, o Options) (*Server, error) {
	if _, err := os.Stat(filepath.Join(binDir, "initdb")); err != nil {
		return nil, fmt.Errorf("PostgreSQL server binaries not found in %s (install postgresql-15): %w", binDir, err)
	}
	pgdata := filepath.Join(o.DataDir, "pgdata")
	var uid, gid = -1, -1 // -1: as this process
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			return nil, fmt.Errorf("running as root and no postgres or nobody user to run PostgreSQL as: %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(o.DataDir, uid, gid); err != nil {
			return nil, err
		}
		if err := os.Chmod(o.DataDir, 0o700); err != nil {
			return nil, err
		}
	}
	init := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", pgdata, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	init.SysProcAttr = runAs(uid, gid)
	init.Dir = o.DataDir
	if out, err := init.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	fsync := "off"
	if o.DurablePostgres {
		fsync = "on"
	}
	cmd := exec.Command(filepath.Join(binDir, "postgres"), "-D", pgdata, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-k", o.DataDir, "-c", "fsync="+fsync, "-c", "max_connections=200", "-c", "shared_buffers=128MB")
	cmd.SysProcAttr = runAs(uid, gid)
	cmd.Dir = o.DataDir
	if o.LogFile == "" {
		// In its data directory, removed with it (one in the temporary
		// directory was left behind by every start).
		o.LogFile = filepath.Join(o.DataDir, "server.log")
	}
	s, err := start(cmd, o)
	if err != nil {
		return nil, err
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			// Accepting connections is not yet ready; pg_isready knows.
			if exec.Command(filepath.Join(binDir, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(port)).Run() == nil {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("postgres exited during start-up: %s", tail(o.LogFile))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("postgres did not become ready in 60s: " + tail(o.LogFile))
		}
	}
}

// DynaliteVersion is the pinned version of dynalite, the DynamoDB API on
// Node the DynamoDB ledger is tested on (npm package; AWS's own DynamoDB
// Local may not be used here: its licence). It has conditions, update
// expressions, queries and secondary indexes; no transactions and no TTL.
const DynaliteVersion = "4.0.0"

// NodeBinary is the Node.js the machine has ($CAIRN_NODE, else node on PATH).
func NodeBinary() (string, error) {
	if p := os.Getenv("CAIRN_NODE"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("no node on PATH (dynalite needs Node.js 20 or newer): %w", err)
	}
	return p, nil
}

// DynaliteCLI returns the path of dynalite's cli.js in the cache
// (<CacheDir>/dynalite/node_modules/dynalite/cli.js) and whether the pinned
// version is installed there.
func DynaliteCLI() (string, bool) {
	dir := filepath.Join(CacheDir(), "dynalite", "node_modules", "dynalite")
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	ok := err == nil && strings.Contains(string(data), `"version": "`+DynaliteVersion+`"`)
	return filepath.Join(dir, "cli.js"), ok
}

// InstallDynalite installs the pinned dynalite into the cache with the
// machine's npm (npm install --prefix <CacheDir>/dynalite), once.
func InstallDynalite(ctx context.Context, log io.Writer) (string, error) {
	cli, ok := DynaliteCLI()
	if ok {
		return cli, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("no npm on PATH (install Node.js 20 and npm to run dynalite): %w", err)
	}
	prefix := filepath.Join(CacheDir(), "dynalite")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "services: installing dynalite@%s into %s once\n", DynaliteVersion, prefix)
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", prefix, "--no-audit", "--no-fund", "--no-save", "dynalite@"+DynaliteVersion)
	cmd.Dir = prefix
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("npm install dynalite@%s: %w", DynaliteVersion, err)
	}
	if cli, ok = DynaliteCLI(); !ok {
		return "", fmt.Errorf("npm install succeeded but dynalite %s is missing at %s", DynaliteVersion, cli)
	}
	return cli, nil
}

// StartDynalite starts dynalite (cli, from DynaliteCLI) on a free loopback
// port with an in-memory store; Server.URL is its endpoint
// (http://127.0.0.1:PORT). Any credentials are accepted.
func StartDynalite(ctx context.Context, cli string, o Options) (*Server, error) {
	node, err := NodeBinary()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Tables are ACTIVE at once (the default keeps them CREATING for 500 ms).
	cmd := exec.Command(node, cli, "--port", strconv.Itoa(port), "--host", "127.0.0.1",
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	cmd.Env = append(os.Environ(), o.Env...)
	s, err := start(cmd, o)
	if err != nil {
		return nil, err
	}
	s.URL, s.AccessKey, s.SecretKey = "http://"+addr, "cairnadmin", "cairnadmin-secret"
	// Ready once it answers HTTP (an unsigned request is a 400).
	if err := waitReady(ctx, s, "dynalite", o, func() bool {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}); err != nil {
		return nil, err
	}
	return s, nil
}
