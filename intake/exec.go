package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ExitRetry is the exit status with which an exec handler asks for a retry
// later (EX_TEMPFAIL from sysexits.h).
const ExitRetry = 75

// ExecHandler runs a command per claim. The command gets the environment
// CAIRN_BUCKET, CAIRN_KEY, CAIRN_VERSION_ID, CAIRN_ETAG, CAIRN_SIZE,
// CAIRN_SEQUENCER, CAIRN_EVENT (created or removed), CAIRN_EVENT_NAME,
// CAIRN_FENCING_TOKEN and CAIRN_ATTEMPT on top of cairn's own, and the Payload
// as JSON on stdin. Exit 0: processed (the first 4 KiB of stdout are the
// result). Exit 75: retry later. Any other exit: a permanent failure (dead
// letter; replayable). Killed by a signal or by the timeout: retried. On
// timeout or cancellation the whole process group is killed.
//
// An audit's resubmission has an empty CAIRN_SEQUENCER and a CAIRN_EVENT_NAME
// beginning "cairn:Audit:" (event.AuditPrefix): S3 never numbered that change,
// so a handler must not deduplicate it by (key, sequencer).
type ExecHandler struct {
	// Argv is the command and its arguments (no shell).
	Argv []string
	// Dir is the working directory ("" = cairn's).
	Dir string
	// Env is added to the environment.
	Env []string
}

// Shell returns an ExecHandler that runs command with /bin/sh -c, so the
// command line may use the shell's quoting, variables and pipes.
func Shell(command string) *ExecHandler {
	return &ExecHandler{Argv: []string{"/bin/sh", "-c", command}}
}

// Handle runs the command for w.
func (h *ExecHandler) Handle(ctx context.Context, w Work) (string, error) {
	if len(h.Argv) == 0 {
		return "", Permanent(errors.New("intake: exec handler without a command"))
	}
	in, err := json.Marshal(w.Payload())
	if err != nil {
		return "", Permanent(err)
	}
	cmd := exec.CommandContext(ctx, h.Argv[0], h.Argv[1:]...)
	cmd.Dir = h.Dir
	ev := w.Event
	cmd.Env = append(os.Environ(), h.Env...)
	cmd.Env = append(cmd.Env,
		"CAIRN_BUCKET="+ev.Bucket, "CAIRN_KEY="+ev.Key, "CAIRN_VERSION_ID="+ev.VersionID, "CAIRN_ETAG="+ev.ETag,
		"CAIRN_SIZE="+strconv.FormatInt(ev.Size, 10), "CAIRN_SEQUENCER="+ev.Sequencer, "CAIRN_EVENT="+string(ev.Kind),
		"CAIRN_EVENT_NAME="+ev.Name, "CAIRN_FENCING_TOKEN="+strconv.FormatInt(w.Token, 10), "CAIRN_ATTEMPT="+strconv.Itoa(w.Attempt))
	cmd.Stdin = bytes.NewReader(in)
	stdout := &capped{n: 4096}
	stderr := &capped{n: 4096}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	processGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	tail := strings.TrimSpace(stderr.String())
	if tail != "" {
		tail = ": " + tail
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("handler %s stopped (%v)%s", h.Argv[0], context.Cause(ctx), tail)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		switch code := exit.ExitCode(); code {
		case ExitRetry:
			return "", fmt.Errorf("handler %s asked to retry (exit %d)%s", h.Argv[0], code, tail)
		case -1:
			return "", fmt.Errorf("handler %s: %v%s", h.Argv[0], exit, tail) // a signal: retry
		default:
			return "", Permanent(fmt.Errorf("handler %s failed (exit %d)%s", h.Argv[0], code, tail))
		}
	}
	return "", fmt.Errorf("handler %s: %w", h.Argv[0], err) // could not start: retry
}

// capped keeps the first n bytes written.
type capped struct {
	bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
