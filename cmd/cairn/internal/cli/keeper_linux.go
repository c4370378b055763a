package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// # The deadline keeper of cairn lock run and lock tree
//
// A holder that is stopped (SIGSTOP, a long pause, a frozen VM) cannot run
// its own timers, and the command it runs is another process that keeps
// running. So the command runs in the process group of a keeper: cairn
// itself, started as the hidden `cairn lock keep NS` before the command, which
// leads the group, holds the lock's deadline and kills the whole group
// (itself included) when the deadline passes or when the holder dies
// (however it dies: its pipe reaches EOF). The holder sends each later
// deadline after a renewal, and "end" once the command has exited.
//
// Deadlines are absolute on CLOCK_BOOTTIME, a clock every process of the
// machine reads alike and that runs on while the machine is suspended (as the
// store's clock does): a message that waited in the pipe while the holder
// was stopped extends nothing beyond what the renewal proved. The holder
// reads CLOCK_BOOTTIME before its own clock, so that a stall between the two
// readings only makes a deadline earlier. The keeper only ever raises the
// deadline it holds.

// bootNow reads CLOCK_BOOTTIME.
func bootNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return ts.Nano()
}

// bootAt is t (on this process's monotonic clock) on CLOCK_BOOTTIME.
func bootAt(t time.Time) int64 {
	m := bootNow() // first: see above
	return m + int64(time.Until(t))
}

// keeperName is the keeper's process name (and argv[0]): it names no
// cairn, so that pkill cairn (or pkill -f cairn) leaves it to kill the
// command's group once cairn is gone. The name is set when the keeper
// starts: for the moment between its exec and that, it is still "cairn".
const keeperName = "deadline-keeper"

// keeper is the holder's end of a running keeper.
type keeper struct {
	cmd  *exec.Cmd
	pipe *os.File
	mu   sync.Mutex
	sent int64
}

// startKeeper starts a keeper whose group the command joins (its pid is
// the group), with the first deadline.
func startKeeper(deadline time.Time) (*keeper, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	at := bootAt(deadline)
	cmd := exec.Command(bin, "lock", "keep", strconv.FormatInt(at, 10))
	cmd.Args[0] = keeperName
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the deadline keeper: %w", err)
	}
	return &keeper{cmd: cmd, pipe: w, sent: at}, nil
}

// pgid is the process group the command joins.
func (k *keeper) pgid() int { return k.cmd.Process.Pid }

// extend sends a later deadline (a write that blocks is abandoned: the
// earlier deadline stays, which only kills sooner).
func (k *keeper) extend(deadline time.Time) {
	at := bootAt(deadline)
	k.mu.Lock()
	defer k.mu.Unlock()
	if at <= k.sent {
		return
	}
	_ = k.pipe.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := fmt.Fprintf(k.pipe, "deadline %d\n", at); err == nil {
		k.sent = at
	}
}

// end tells the keeper that the command exited, and waits for it.
func (k *keeper) end() {
	k.mu.Lock()
	_ = k.pipe.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	_, _ = io.WriteString(k.pipe, "end\n")
	k.pipe.Close()
	k.mu.Unlock()
	_ = k.cmd.Wait()
}

// keep is the keeper's main: it kills its own process group at the deadline
// or when stdin ends without "end".
func keep(first int64, in io.Reader) error {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(unsafe.StringData(keeperName+"\x00"))), 0, 0, 0)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := first
	killGroup := func(why string) {
		fmt.Fprintln(os.Stderr, "cairn lock: killing the command:", why)
		_ = syscall.Kill(-syscall.Getpgrp(), syscall.SIGKILL) // this process too
		os.Exit(1)
	}
	t := time.NewTimer(time.Duration(deadline - bootNow()))
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				killGroup("its holder exited without releasing the lock")
			}
			f := strings.Fields(line)
			switch {
			case len(f) == 1 && f[0] == "end":
				// What the command left in the group dies with the run.
				_ = syscall.Kill(-syscall.Getpgrp(), syscall.SIGKILL) // this process too
				return nil
			case len(f) == 2 && f[0] == "deadline":
				if d, err := strconv.ParseInt(f[1], 10, 64); err == nil && d > deadline {
					deadline = d
				}
			}
		case <-t.C:
		}
		left := time.Duration(deadline - bootNow())
		if left <= 0 {
			killGroup("the lock's deadline passed before its holder confirmed a renewal (the holder stalled or was cut off)")
		}
		t.Reset(left)
	}
}
