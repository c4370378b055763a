// Package testenv gives tests real servers: S3 servers (MinIO, versitygw,
// gofakes3, SeaweedFS, Ceph RGW) and PostgreSQL (package lambdatest does the same for AWS's Lambda
// Runtime Interface Emulator). Each is taken from the environment when set
// (CAIRN_TEST_S3_ENDPOINT with CAIRN_TEST_S3_ACCESS_KEY /
// CAIRN_TEST_S3_SECRET_KEY for MinIO, CAIRN_TEST_VERSITYGW_*,
// CAIRN_TEST_GOFAKES3_*, CAIRN_TEST_SEAWEEDFS_* and CAIRN_TEST_CEPH_* likewise; CAIRN_TEST_POSTGRES_URL;
// CAIRN_TEST_DYNAMODB_ENDPOINT for dynalite),
// else started once per test binary on 127.0.0.1 and killed when the binary
// exits (call Stop from TestMain; a killed binary takes them along by
// Pdeathsig). When a server cannot be had, a test fails if
// CAIRN_TEST_REQUIRE_SERVICES=1 or CI is set (real components are never skipped
// silently in CI) and is skipped with the reason otherwise.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
	"github.com/cairn-s3/cairn/internal/testing/services"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/s3store"
)

// S3Endpoint is an S3 server for tests.
type S3Endpoint struct {
	URL, AccessKey, SecretKey string
}

var (
	mu      sync.Mutex
	s3s     = map[string]*services.Server{}
	s3Errs  = map[string]error{}
	tmpDirs []string
)

func required() bool {
	return os.Getenv("CAIRN_TEST_REQUIRE_SERVICES") == "1" || os.Getenv("CI") != ""
}

// Unavailable ends a test that needs what (a real component) and cannot have
// it (err says why): it fails if CAIRN_TEST_REQUIRE_SERVICES=1 or CI is set,
// and skips with the reason otherwise.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	unavailable(t, what, err)
}

func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if required() {
		t.Fatalf("%s is required here but unavailable: %v", what, err)
	}
	t.Skipf("%s unavailable (run the README's test command to have it installed and started): %v", what, err)
}

// S3 returns the MinIO endpoint for tests, starting MinIO if needed.
func S3(t testing.TB) S3Endpoint {
	t.Helper()
	return S3Server(t, "minio")
}

// S3ServerNames are the S3 servers the suites run on (services.S3Servers):
// minio, versitygw, gofakes3, seaweedfs, ceph.
func S3ServerNames() []string { return services.S3ServerNames() }

// S3Server returns the endpoint of the named S3 server ("minio", "versitygw",
// "gofakes3", "seaweedfs", "ceph"; see services.S3Servers), starting it if its CAIRN_TEST_*
// variables are not set.
func S3Server(t testing.TB, name string) S3Endpoint {
	t.Helper()
	prefix := "CAIRN_TEST_" + strings.ToUpper(name) + "_"
	if name == "minio" {
		prefix = "CAIRN_TEST_S3_"
	}
	if u := os.Getenv(prefix + "ENDPOINT"); u != "" {
		ep := S3Endpoint{URL: u, AccessKey: os.Getenv(prefix + "ACCESS_KEY"), SecretKey: os.Getenv(prefix + "SECRET_KEY")}
		if ep.AccessKey == "" {
			ep.AccessKey, ep.SecretKey = "minioadmin", "minioadmin"
		}
		return ep
	}
	mu.Lock()
	defer mu.Unlock()
	if s3s[name] == nil && s3Errs[name] == nil {
		bin, ok := services.Binary(name)
		if !ok {
			s3Errs[name] = fmt.Errorf("no %s binary at %s (build it: go run ./internal/testing/cmd/services install)", name, bin)
		} else if dir, err := os.MkdirTemp("", "cairn-"+name+"-"); err != nil {
			s3Errs[name] = err
		} else {
			tmpDirs = append(tmpDirs, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			s3s[name], s3Errs[name] = services.StartS3(ctx, name, bin, services.Options{DataDir: dir, DieWithParent: true})
			cancel()
		}
	}
	if err := s3Errs[name]; err != nil {
		unavailable(t, name, err)
	}
	x := s3s[name]
	return S3Endpoint{URL: x.URL, AccessKey: x.AccessKey, SecretKey: x.SecretKey}
}

// Stop stops the servers this binary started and removes their data. Call it
// from TestMain after m.Run.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	for name, x := range s3s {
		x.Stop()
		delete(s3s, name)
	}
	pg.Stop()
	pg = nil
	dyn.Stop()
	dyn, dynErr = nil, nil
	for _, d := range tmpDirs {
		os.RemoveAll(d)
	}
	tmpDirs = nil
}

// RunTempDir creates a temporary directory that lives as long as the test
// binary: Stop removes it. For what is built or started once per binary.
func RunTempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	mu.Lock()
	tmpDirs = append(tmpDirs, dir)
	mu.Unlock()
	return dir, nil
}

// UniqueName returns a fresh lowercase name usable as a bucket.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(prefix) + "-" + hex.EncodeToString(b[:])
}

// NewBucket creates a fresh bucket on ep and returns an s3 Backend on it, plus
// the store URL other processes can open (credentials go through the
// environment: see Env).
func NewBucket(t testing.TB, ep S3Endpoint) (*s3store.Backend, string) {
	t.Helper()
	bucket := UniqueName("cairn-test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := s3store.OpenBackend(ctx, bucket, &s3store.Options{Endpoint: ep.URL, Region: "us-east-1", PathStyle: true,
		AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureBucket(ctx); err != nil {
		t.Fatalf("creating bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() { emptyBucket(b) })
	return b, fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1&path_style=true", bucket, ep.URL)
}

// Env returns the environment a child process needs to open ep's URLs.
func (ep S3Endpoint) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + ep.AccessKey, "AWS_SECRET_ACCESS_KEY=" + ep.SecretKey, "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true"}
}

func emptyBucket(b *s3store.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := objstore.New(b, nil)
	for info, err := range s.List(ctx, "", nil) {
		if err != nil {
			return
		}
		_ = s.Delete(ctx, info.Key, objstore.Condition{})
	}
}

var (
	pg    *services.Server
	pgErr error
)

var (
	dyn    *services.Server
	dynErr error
)

// DynamoDB returns the endpoint of a DynamoDB API server for tests (dynalite),
// starting one if CAIRN_TEST_DYNAMODB_ENDPOINT is not set. It accepts any
// credentials; DynamoDBEnv is the environment for clients and children.
func DynamoDB(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("CAIRN_TEST_DYNAMODB_ENDPOINT"); u != "" {
		return u
	}
	mu.Lock()
	defer mu.Unlock()
	if dyn == nil && dynErr == nil {
		cli, ok := services.DynaliteCLI()
		if !ok {
			dynErr = fmt.Errorf("dynalite %s is not installed at %s (install it: go run ./internal/testing/cmd/services install)", services.DynaliteVersion, cli)
		} else if dir, err := os.MkdirTemp("", "cairn-dynalite-"); err != nil {
			dynErr = err
		} else {
			tmpDirs = append(tmpDirs, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			dyn, dynErr = services.StartDynalite(ctx, cli, services.Options{DataDir: dir, DieWithParent: true})
			cancel()
		}
	}
	if dynErr != nil {
		unavailable(t, "dynalite (DynamoDB)", dynErr)
	}
	return dyn.URL
}

// DynamoDBEnv is the environment a DynamoDB client (or a child process) needs
// for the test server: any static credentials and a region.
func DynamoDBEnv() []string {
	return []string{"AWS_ACCESS_KEY_ID=cairnadmin", "AWS_SECRET_ACCESS_KEY=cairnadmin-secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true"}
}

// Postgres returns the base URL of a PostgreSQL server for tests, starting one
// if CAIRN_TEST_POSTGRES_URL is not set.
func Postgres(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("CAIRN_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	mu.Lock()
	defer mu.Unlock()
	if pg == nil && pgErr == nil {
		dir, err := os.MkdirTemp("", "cairn-pg-")
		if err != nil {
			pgErr = err
		} else {
			tmpDirs = append(tmpDirs, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			pg, pgErr = services.StartPostgres(ctx, services.PostgresBinDir, services.Options{DataDir: dir, DieWithParent: true})
			cancel()
		}
	}
	if pgErr != nil {
		unavailable(t, "PostgreSQL", pgErr)
	}
	return pg.URL
}

// PGExec runs one SQL statement at url through database/sql's "pgx" driver
// (registered by package ledger/postgres, which every PostgreSQL test links):
// the exec PostgresSchema needs.
func PGExec(ctx context.Context, url, q string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, q)
	return err
}

// PostgresSchema creates a fresh schema for one test and returns a URL whose
// connections use it (search_path); the schema is dropped at cleanup.
func PostgresSchema(t testing.TB, exec func(ctx context.Context, url, sql string) error) string {
	t.Helper()
	base := Postgres(t)
	schema := strings.ReplaceAll(UniqueName("t"), "-", "_")
	ctx := context.Background()
	if err := exec(ctx, base, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	t.Cleanup(func() { _ = exec(context.Background(), base, "DROP SCHEMA "+schema+" CASCADE") })
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

// OwnDurablePostgres starts a PostgreSQL server for this test alone with its
// default fsync=on (the shared one runs with fsync off) and returns its URL;
// it stops when the test ends.
func OwnDurablePostgres(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cairn-pg-durable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := services.StartPostgres(ctx, services.PostgresBinDir, services.Options{DataDir: dir, DieWithParent: true, DurablePostgres: true})
	if err != nil {
		unavailable(t, "PostgreSQL", err)
	}
	t.Cleanup(s.Stop)
	return s.URL
}

// OwnMinIO starts a MinIO server for this test alone, with env added (e.g.
// MINIO_NOTIFY_WEBHOOK_* notification targets, which MinIO reads only at
// start-up), and stops it when the test ends.
func OwnMinIO(t testing.TB, env ...string) S3Endpoint {
	t.Helper()
	bin, ok := services.MinIOBinary()
	if !ok {
		unavailable(t, "MinIO", fmt.Errorf("no MinIO binary at %s (build it: GOBIN=%s/bin go install %s)", bin, services.CacheDir(), services.MinIOModule))
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := services.StartMinIO(ctx, bin, services.Options{DataDir: dir, DieWithParent: true, Env: env})
	if err != nil {
		unavailable(t, "MinIO", err)
	}
	t.Cleanup(s.Stop)
	return S3Endpoint{URL: s.URL, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
}

// Chromium returns the path of a Chromium binary for browser tests:
// CAIRN_TEST_CHROMIUM, else /usr/bin/chromium (Debian's package, which the
// README's test command installs).
func Chromium(t testing.TB) string {
	t.Helper()
	p := os.Getenv("CAIRN_TEST_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		unavailable(t, "Chromium", err)
	}
	return p
}

// Terraform returns a terraform binary and a provider plugin directory
// (terraform init -plugin-dir: no registry access) for the tests of the
// deployment templates: CAIRN_TEST_TERRAFORM, else terraform on PATH, and
// CAIRN_TEST_TF_PLUGIN_DIR, else /opt/tf-plugins, which must hold the
// providers the templates pin (hashicorp/aws 5.100.0:
// registry.terraform.io/hashicorp/aws/5.100.0/<os>_<arch>/).
func Terraform(t testing.TB) (bin, pluginDir string) {
	t.Helper()
	// The test command cannot install Terraform or its provider (neither
	// Debian nor the Go module proxy has them): without them the test skips
	// saying so, even where every service is required.
	unavailable := func(t testing.TB, what string, err error) {
		t.Helper()
		t.Skipf("%s unavailable; the test command does not install it: %v", what, err)
	}
	bin = os.Getenv("CAIRN_TEST_TERRAFORM")
	if bin == "" {
		p, err := exec.LookPath("terraform")
		if err != nil {
			unavailable(t, terraformWhat, err)
		}
		bin = p
	} else if _, err := os.Stat(bin); err != nil {
		unavailable(t, terraformWhat, err)
	}
	pluginDir = os.Getenv("CAIRN_TEST_TF_PLUGIN_DIR")
	if pluginDir == "" {
		pluginDir = "/opt/tf-plugins"
	}
	if _, err := os.Stat(filepath.Join(pluginDir, "registry.terraform.io", "hashicorp", "aws")); err != nil {
		unavailable(t, "Terraform's AWS provider 5.100.0 (mirror it: terraform providers mirror DIR, then CAIRN_TEST_TF_PLUGIN_DIR=DIR)", err)
	}
	return bin, pluginDir
}

// terraformWhat names Terraform in a skip or failure: the test command does
// not install it.
const terraformWhat = "Terraform 1.11 or newer (put terraform on PATH or set CAIRN_TEST_TERRAFORM)"

// ArtifactDir is where tests keep what a person may want to look at after a
// run (screenshots): CAIRN_TEST_ARTIFACTS, else <tmp>/cairn-test-artifacts.
func ArtifactDir(t testing.TB) string {
	t.Helper()
	d := os.Getenv("CAIRN_TEST_ARTIFACTS")
	if d == "" {
		d = filepath.Join(os.TempDir(), "cairn-test-artifacts")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// ThroughFaultProxy starts a faultproxy in front of ep (with no faults until
// the test sets them) and returns it with a backend on bucket that sends
// every request through it. Both are closed at the end of the test.
func ThroughFaultProxy(t testing.TB, ep S3Endpoint, bucket string) (*faultproxy.Proxy, *s3store.Backend) {
	t.Helper()
	p, err := faultproxy.New(ep.URL, faultproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := s3store.OpenBackend(ctx, bucket, &s3store.Options{Endpoint: p.URL, Region: "us-east-1", PathStyle: true,
		AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

// AssumeRole gets temporary credentials (access key, secret key, session
// token) from ep's STS API (MinIO's), signed with ep's root credentials; a
// non-empty policy is the session policy that narrows them.
func AssumeRole(t testing.TB, ep S3Endpoint, policy string) (ak, sk, st string) {
	t.Helper()
	form := url.Values{"Action": {"AssumeRole"}, "Version": {"2011-06-15"}, "DurationSeconds": {"3600"}}
	if policy != "" {
		form.Set("Policy", policy)
	}
	body := form.Encode()
	req, err := http.NewRequest(http.MethodPost, ep.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "sts", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r struct {
		Creds struct {
			AccessKeyID     string `xml:"AccessKeyId"`
			SecretAccessKey string
			SessionToken    string
		} `xml:"AssumeRoleResult>Credentials"`
	}
	if err := xml.Unmarshal(data, &r); err != nil || resp.StatusCode != 200 || r.Creds.SessionToken == "" {
		t.Fatalf("STS AssumeRole on %s: %s %v %s", ep.URL, resp.Status, err, data)
	}
	return r.Creds.AccessKeyID, r.Creds.SecretAccessKey, r.Creds.SessionToken
}

// NATS starts an in-process NATS server with JetStream on 127.0.0.1 (a real
// nats-server, linked as a library) for one test and returns its client URL
// (nats://127.0.0.1:PORT); it shuts down when the test ends.
func NATS(t testing.TB) string {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready in 10s")
	}
	return ns.ClientURL()
}
