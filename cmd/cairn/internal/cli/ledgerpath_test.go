package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSaysWhereTheDefaultLedgerIs: the default ledger is a path relative
// to the directory serve starts in; its start-up line names the file.
func TestServeSaysWhereTheDefaultLedgerIs(t *testing.T) {
	t.Parallel()
	bin := buildCairn(t)
	dir := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--handler-exec", "true", "--log-level", "info")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.SysProcAttr = diesWithTest()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	want := filepath.Join(dir, "cairn-data", "ledger.db")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		if line, ok := lineWith(string(b), "cairn serve started"); ok {
			if !strings.Contains(line, want) {
				t.Fatalf("the start-up line does not name %s:\n%s", want, line)
			}
			return
		}
		select {
		case <-done:
			t.Fatalf("serve exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no start-up line in 30s:\n%s", b)
		}
	}
}

func lineWith(s, sub string) (string, bool) {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l, true
		}
	}
	return "", false
}
