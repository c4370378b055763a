package cli_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
)

// A holder of a lease (cairn lock run, which gives its command
// CAIRN_FENCING_TOKEN) is stopped with SIGSTOP past its TTL. Its command's
// process group is killed at the deadline, but a process of the command that
// left the group (setsid, as a daemonising handler does) is beyond cairn's
// reach: fencing is what stops its writes. Another process takes the lease and
// writes through put --fence-token and doc update --fence-token; the escaped
// writer then writes through the same helpers: both of its writes are refused
// with exit 3, and the successor's stay.
func TestFencedWritesOfAStalledHolder(t *testing.T) {
	t.Parallel()
	t.Run("dir", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		stalledHolder(t, "file://"+dir+"/locks/job", func(key string) string { return "file://" + dir + "/" + key }, nil,
			func(t *testing.T, key string) (*objstore.Store, string) {
				s, k, err := objstore.OpenObject(context.Background(), "file://"+dir+"/"+key, nil)
				if err != nil {
					t.Fatal(err)
				}
				return s, k
			})
	})
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		ep := testenv.S3(t)
		b, url := testenv.NewBucket(t, ep)
		u, _ := objstore.ParseURL(url)
		at := func(key string) string { return "s3://" + u.Host + "/" + key + "?" + u.RawQuery }
		stalledHolder(t, at("locks/job"), at, ep.Env(), func(_ *testing.T, key string) (*objstore.Store, string) {
			return objstore.New(b, nil), key
		})
	})
}

func stalledHolder(t *testing.T, leaseURL string, at func(key string) string, env []string,
	open func(t *testing.T, key string) (*objstore.Store, string)) {
	bin := buildCairn(t)
	d := t.TempDir()
	for name, body := range map[string]string{"a.txt": "from the stalled holder\n", "b.txt": "from the successor\n"} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, doc := at("out/report.txt"), at("out/state.json")
	// The writer: announce its pid, wait for "go", then write through both
	// helpers, recording each exit status. It ignores SIGTERM, as a handler
	// that does not stop in time would.
	for _, who := range []string{"A", "B"} {
		w := `trap '' TERM
echo $$ > "$D/pid` + who + `.tmp" && mv "$D/pid` + who + `.tmp" "$D/pid` + who + `"
while [ ! -e "$D/go` + who + `" ]; do sleep 0.05; done
"$BIN" put "$D/` + strings.ToLower(who) + `.txt" "$OUT" --fence-token "$CAIRN_FENCING_TOKEN" 2> "$D/err` + who + `-put"; echo $? > "$D/rc` + who + `-put"
"$BIN" doc update "$DOC" --create --set by=` + who + ` --fence-token "$CAIRN_FENCING_TOKEN" 2> "$D/err` + who + `-doc"; echo $? > "$D/rc` + who + `-doc.tmp"; mv "$D/rc` + who + `-doc.tmp" "$D/rc` + who + `-doc"
`
		if err := os.WriteFile(filepath.Join(d, "writer"+who+".sh"), []byte(w), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The handler: announce its token, then run the writer: the successor's
	// in its own process group; the stalled holder's in a session of its own
	// (out of cairn's reach), while the command itself waits to be killed.
	handler := func(who string) string {
		h := `trap '' TERM
echo "$CAIRN_FENCING_TOKEN" > "$D/tok` + who + `.tmp" && mv "$D/tok` + who + `.tmp" "$D/tok` + who + `"
`
		if who == "A" {
			return h + `setsid sh "$D/writerA.sh" < /dev/null > /dev/null 2>&1 &
while :; do sleep 1; done
`
		}
		return h + `sh "$D/writerB.sh"
`
	}
	cmdEnv := append(append(os.Environ(), env...), "D="+d, "BIN="+bin, "OUT="+out, "DOC="+doc)
	a := exec.Command(bin, "lock", "run", leaseURL, "--ttl", "3s", "--", "sh", "-c", handler("A"))
	a.Env = cmdEnv
	a.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() { aDone <- a.Wait() }()
	var shA int
	t.Cleanup(func() {
		for _, pid := range []int{-a.Process.Pid, -shA} {
			if pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	waitFile(t, filepath.Join(d, "pidA"), aDone)
	tokA := readInt(t, filepath.Join(d, "tokA"))
	shA = readInt(t, filepath.Join(d, "pidA"))

	// Stall the holder: cairn lock run cannot renew, and its command's group
	// is killed at the deadline; the escaped writer waits on.
	if err := syscall.Kill(a.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	// The successor waits out the TTL, takes the lease and writes.
	if err := os.WriteFile(filepath.Join(d, "goB"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b := exec.Command(bin, "lock", "run", leaseURL, "--ttl", "3s", "--wait", "60s", "--", "sh", "-c", handler("B"))
	b.Env = cmdEnv
	if outB, err := b.CombinedOutput(); err != nil {
		t.Fatalf("successor: %v\n%s", err, outB)
	}
	tokB := readInt(t, filepath.Join(d, "tokB"))
	if tokB <= tokA {
		t.Fatalf("successor's token %d is not above the stalled holder's %d", tokB, tokA)
	}
	for _, w := range []string{"put", "doc"} {
		if rc := readInt(t, filepath.Join(d, "rcB-"+w)); rc != 0 {
			msg, _ := os.ReadFile(filepath.Join(d, "errB-"+w))
			t.Fatalf("successor's %s: exit %d: %s", w, rc, msg)
		}
	}

	// Let the escaped writer write (its cairn lock run stays stopped), then
	// continue cairn lock run.
	if err := os.WriteFile(filepath.Join(d, "goA"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(d, "rcA-doc"), nil)
	if err := syscall.Kill(a.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-aDone:
		t.Logf("stalled holder's cairn lock run: exit %d", exitOf(err))
	case <-time.After(60 * time.Second):
		t.Fatal("the stalled holder's cairn lock run did not end")
	}
	for _, w := range []string{"put", "doc"} {
		rc := readInt(t, filepath.Join(d, "rcA-"+w))
		msg, _ := os.ReadFile(filepath.Join(d, "errA-"+w))
		want := "fencing token " + strconv.Itoa(tokA) + " is lower than token " + strconv.Itoa(tokB)
		if rc != cli.ExitPrecondition || !strings.Contains(string(msg), want) {
			t.Errorf("stalled holder's %s: exit %d, %q; want exit 3 saying %q", w, rc, msg, want)
		}
	}

	ctx := context.Background()
	s, key := open(t, "out/report.txt")
	body, m, err := fence.Get(ctx, s, key)
	if err != nil || string(body) != "from the successor\n" || m.Token != int64(tokB) {
		t.Fatalf("object after the stale write: %q token %d %v; want the successor's, token %d", body, m.Token, err, tokB)
	}
	s, key = open(t, "out/state.json")
	v, dm, err := fence.Load[map[string]string](ctx, docstore.New(s, nil), key)
	if err != nil || v["by"] != "B" || dm.Token != int64(tokB) {
		t.Fatalf("document after the stale update: %v token %d %v; want by=B, token %d", v, dm.Token, err, tokB)
	}
}

// waitFile waits for path to exist (a process's sign of progress), failing
// if exited says the process ended first.
func waitFile(t *testing.T, path string, exited <-chan error) {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			t.Fatalf("the process ended (exit %d) before writing %s", exitOf(err), filepath.Base(path))
		case <-deadline:
			t.Fatalf("no %s after 90s", filepath.Base(path))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("%s: %q", filepath.Base(path), data)
	}
	return n
}

// --fence-token's usage errors say what to pass; a stale token exits 3 with
// the two tokens, on put and on doc update.
func TestFenceTokenFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	obj, doc := "file://"+dir+"/out/f.txt", "file://"+dir+"/out/d.json"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"put", "f.txt", obj, "--fence-token", ""}, cli.ExitUsage, "CAIRN_FENCING_TOKEN"},
		{[]string{"put", "f.txt", obj, "--fence-token", "-1"}, cli.ExitUsage, "not a fencing token"},
		{[]string{"put", "f.txt", obj, "--fence-token", "1", "--if-absent"}, cli.ExitUsage, "drop --if-absent"},
		{[]string{"doc", "update", doc, "--set", "a=1", "--create", "--fence-token", "x"}, cli.ExitUsage, "not a fencing token"},
		{[]string{"put", "f.txt", obj, "--fence-token", "7"}, 0, ""},
		{[]string{"put", "f.txt", obj, "--fence-token", "7"}, 0, ""},
		{[]string{"put", "f.txt", obj, "--fence-token", "6"}, cli.ExitPrecondition, "fencing token 6 is lower than token 7"},
		{[]string{"doc", "update", doc, "--set", "a=1", "--create", "--fence-token", "7"}, 0, ""},
		{[]string{"doc", "update", doc, "--set", "a=2", "--fence-token", "6"}, cli.ExitPrecondition, "fencing token 6 is lower than token 7"},
	} {
		code, _, stderr := runBin(t, dir, nil, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("cairn %q: exit %d, %q; want exit %d saying %q", c.args, code, stderr, c.code, c.want)
		}
	}
}
