package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/services"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

// A libpq keyword/value string given as --ledger is refused with the reason
// and the fix, shows no password, and creates no file (it used to be taken as
// a SQLite path: logged whole and created as a file named after it).
func TestLedgerKeywordStringRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := t.TempDir()
	kw := "host=127.0.0.1 port=1 user=u password=kw-s3cret dbname=cairn"
	for _, args := range [][]string{
		{"ledger", "ls", "--ledger", kw},
		{"ledger", "ls", "--ledger", "password='kw-s3cret with spaces' host=h"},
		{"audit", "--store", store, "--bucket", "b", "--ledger", kw},
		{"serve", "--ledger", kw, "--handler-exec", "true", "--listen", "", "--log-level", "debug"},
	} {
		code, out, stderr := runBin(t, dir, nil, args...)
		if code != cli.ExitUsage {
			t.Errorf("cairn %q: exit %d, want %d (stderr %q)", args, code, cli.ExitUsage, stderr)
		}
		if !strings.Contains(stderr, "looks like a libpq keyword/value string") || !strings.Contains(stderr, "use postgres://user:pass@host/db") {
			t.Errorf("cairn %q: stderr %q gives neither the reason nor the fix", args, stderr)
		}
		if strings.Contains(out+stderr, "kw-s3cret") {
			t.Errorf("cairn %q shows the password: %q %q", args, out, stderr)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("the refused ledger strings created %v", ents)
	}
}

// hostile holds the bytes that retitle and clear a terminal, a C1 CSI and
// invalid UTF-8.
const hostile = "evil\x1b]0;pwned\a\x1b[2J-\u009b2J-\xff.txt"

// rawControl reports the first terminal control a text output holds: C0
// other than newline and tab, DEL, C1, or invalid UTF-8.
func rawControl(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return fmt.Sprintf("invalid UTF-8 at byte %d", i)
		case (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return fmt.Sprintf("%U at byte %d", r, i)
		}
	}
	return ""
}

// Text outputs that show keys, buckets and handlers' errors (ledger ls, ledger
// show, fs ls, audit) escape control characters; --json keeps them exact.
func TestTextOutputEscapesKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(filepath.Join(store, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A key objstore would refuse to write, as another tool may leave it.
	if err := os.WriteFile(filepath.Join(store, "in", hostile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ledgerPath := filepath.Join(dir, "ledger.db")
	l, err := ledger.Open(ctx, ledgerPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Record(ctx, "webhook", []event.Event{{Bucket: "b\x1b[31m", Key: "dead/" + hostile, Kind: event.Created, Sequencer: "01", ETag: "e\x1b[1m"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 1, time.Minute)
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
	if err := l.Fail(ctx, cs[0], "handler stderr: \x1b]0;pwned\a\x1b[2J\nsecond line \u009b2J", false); err != nil {
		t.Fatal(err)
	}
	l.Close()

	for _, args := range [][]string{
		{"fs", "ls", "--store", store, "in/"},
		{"audit", "--store", store, "--bucket", "b", "--ledger", ledgerPath, "--grace", "0"},
		{"ledger", "ls", "--ledger", ledgerPath},
		{"ledger", "show", "b\x1b[31m/dead/" + hostile, "--ledger", ledgerPath},
		{"ledger", "show", "b/in/" + hostile, "--ledger", ledgerPath},
	} {
		code, out, stderr := run(t, args...)
		if code != 0 {
			t.Fatalf("cairn %q: exit %d: %s", args, code, stderr)
		}
		if !strings.Contains(out, `\x1b]0;pwned\a\x1b[2J`) {
			t.Errorf("cairn %q: the key is not shown escaped: %q", args, out)
		}
		if c := rawControl(out + stderr); c != "" {
			t.Errorf("cairn %q: output holds %s: %q %q", args, c, out, stderr)
		}
	}
	code, out, _ := run(t, "fs", "ls", "--store", store, "in/", "--json")
	var row struct{ Key string }
	if code != 0 || json.Unmarshal([]byte(out), &row) != nil || row.Key != "in/"+strings.ToValidUTF8(hostile, "\uFFFD") {
		t.Errorf("fs ls --json: %d %q", code, out)
	}
	code, out, _ = run(t, "ledger", "show", "b/in/"+hostile, "--ledger", ledgerPath, "--json")
	var rec ledger.Record
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.Key != "in/"+strings.ToValidUTF8(hostile, "\uFFFD") {
		t.Errorf("ledger show --json: %d %q", code, out)
	}
}

// Every command, at --log-level debug, with known secrets in every place they
// can be given (AWS credentials with a session token, webhook and operator
// tokens, PostgreSQL passwords in a URL's userinfo, as ?password= and
// ?sslpassword=, in a keyword/value string): no secret appears in stdout,
// stderr, serve's log, or what serve answers over HTTP.
func TestNoSecretsInOutput(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	_, storeURL := testenv.NewBucket(t, ep)
	ak, sk, st := testenv.AssumeRole(t, ep, "")
	env := []string{"AWS_ACCESS_KEY_ID=" + ak, "AWS_SECRET_ACCESS_KEY=" + sk, "AWS_SESSION_TOKEN=" + st,
		"AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true"}
	pgBase := testenv.PostgresSchema(t, testenv.PGExec)
	u, err := url.Parse(pgBase)
	if err != nil {
		t.Fatal(err)
	}
	secret := func(what string) string { return "s3cret-" + what + "-" + testenv.UniqueName("x") }
	pwUser, pwQuery, pwSSL, pwKeyword, pwDown := secret("userinfo"), secret("query"), secret("sslpassword"), secret("keyword"), secret("down")
	webhookToken, operatorToken := secret("webhook"), secret("operator")
	pgUser := *u
	pgUser.User = url.UserPassword(u.User.Username(), pwUser)
	pgQuery := pgBase + "&password=" + pwQuery + "&sslpassword=" + pwSSL
	pgKeyword := fmt.Sprintf("host=%s port=%s user=%s password='%s spaced' dbname=%s sslmode=disable",
		u.Hostname(), u.Port(), u.User.Username(), pwKeyword, strings.TrimPrefix(u.Path, "/"))
	pgDown := "postgres://nobody:" + pwDown + "@127.0.0.1:1/x?connect_timeout=2"
	secrets := map[string]string{"AWS access key": ak, "AWS secret key": sk, "AWS session token": st,
		"webhook token": webhookToken, "operator token": operatorToken, "password in userinfo": pwUser,
		"?password=": pwQuery, "?sslpassword=": pwSSL, "keyword password": pwKeyword, "password of an unreachable server": pwDown}
	check := func(what, text string) {
		t.Helper()
		for name, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows the %s: %s", what, name, tailString(text, 3000))
			}
		}
	}
	object := func(key string) string { return strings.Replace(storeURL, "?", "/"+key+"?", 1) }
	dir := t.TempDir()
	file := filepath.Join(dir, "doc.json")
	if err := os.WriteFile(file, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code int
		args []string
	}{
		{0, []string{"audit", "--store", storeURL, "--ledger", pgUser.String(), "--grace", "0"}}, // creates the ledger the read-only commands below read
		{0, []string{"ledger", "ls", "--ledger", pgUser.String()}},
		{0, []string{"ledger", "ls", "--ledger", pgQuery, "--json"}},
		{cli.ExitUsage, []string{"ledger", "ls", "--ledger", pgKeyword}},
		{cli.ExitRuntime, []string{"ledger", "ls", "--ledger", pgDown}},
		{cli.ExitUsage, []string{"ledger", "ls", "--ledger", "mysql://u:" + pwDown + "@h/db"}},
		{0, []string{"put", file, object("data/x.bin"), "--if-absent"}},
		{0, []string{"doc", "create", object("docs/d.json"), "--file", file}},
		{0, []string{"doc", "update", object("docs/d.json"), "--set", "a=2"}},
		{0, []string{"doc", "get", object("docs/d.json")}},
		{0, []string{"fs", "cp", "--store", storeURL, "data/", "copy/"}},
		{0, []string{"fs", "ls", "--store", storeURL, "copy/"}},
		{0, []string{"audit", "--store", storeURL, "--ledger", pgUser.String(), "--grace", "0"}},
		{0, []string{"audit", "--store", storeURL, "--ledger", pgQuery, "--grace", "0", "--dry-run"}},
	} {
		args := append(tc.args, "--log-level", "debug")
		code, out, stderr := runBin(t, dir, env, args...)
		if code != tc.code {
			t.Errorf("cairn %s: exit %d, want %d: %s", tc.args[:2], code, tc.code, stderr)
		}
		check(fmt.Sprintf("cairn %s (exit %d) output", tc.args[:2], code), out+stderr)
	}

	port, err := services.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startServe(t, port, env, "--ledger", pgQuery, "--webhook-token", webhookToken, "--operator-token", operatorToken,
		"--handler-exec", "cat >/dev/null; echo handler says hello >&2; exit 1", "--max-attempts", "1",
		"--store", storeURL, "--audit-every", "1s", "--audit-grace", "1ms", "--log-level", "debug")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	do := func(method, path, token, body string) string {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		text := fmt.Sprintf("%s %s: %s\n%v\n%s", method, path, resp.Status, resp.Header, data)
		check(text[:min(len(text), 60)], text)
		return string(data)
	}
	u2, _ := objstore.ParseURL(storeURL)
	ev := string(event.S3Body(event.Event{Bucket: u2.Host, Key: "data/x.bin", Kind: event.Created, Sequencer: "01", ETag: "e", Name: "ObjectCreated:Put"}))
	do("POST", "/v1/events", webhookToken, ev)
	do("POST", "/v1/events", "wrong-"+webhookToken, ev)
	do("POST", "/v1/events", "", ev)
	// Wait for the handler's failure (its stderr is the record's last error).
	for deadline := time.Now().Add(60 * time.Second); ; {
		if strings.Contains(do("GET", "/api/v1/status", operatorToken, ""), "handler says hello") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the handler's failure never showed on /api/v1/status")
		}
		time.Sleep(200 * time.Millisecond)
	}
	do("GET", "/", operatorToken, "")
	do("GET", "/", "", "")
	do("GET", "/api/v1/status", "wrong-"+operatorToken, "")
	do("POST", "/api/v1/replay", operatorToken, `{"all": true}`)
	do("POST", "/api/v1/replay", "wrong-"+operatorToken, `{"all": true}`)
	do("GET", "/metrics", "", "")
	do("GET", "/healthz", "", "")
	do("GET", "/readyz", "", "")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	logf := p.cmd.Stdout.(*os.File).Name()
	data, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "cairn serve started") {
		t.Fatalf("serve's log lacks its start line: %s", tailString(string(data), 3000))
	}
	check("serve's log", string(data))
}
