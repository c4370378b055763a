package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// Process tests re-execute the test binary as a child: a test registers the
// child's body by name (RegisterChild, from an init function), starts it with
// Child, and the shared TestMain (testmain.Run) runs it in the child process
// instead of the tests (MaybeChild).

// envChildName names the child a re-executed test binary runs.
const envChildName = "CAIRN_TEST_CHILD_NAME"

var (
	childMu sync.Mutex
	childs  = map[string]func() int{}
)

// RegisterChild registers fn as the body of the child process name; its
// result is the child's exit status. Call it from an init function of a test
// file, so that it is registered before TestMain calls MaybeChild.
// Registering a name twice panics.
func RegisterChild(name string, fn func() int) {
	childMu.Lock()
	defer childMu.Unlock()
	if _, dup := childs[name]; dup {
		panic("testenv: child " + name + " registered twice")
	}
	childs[name] = fn
}

// MaybeChild runs the child this process was started as (by Child) and exits
// with its status; in the test binary's own process it returns at once.
// testmain.Run calls it first.
func MaybeChild() {
	name := os.Getenv(envChildName)
	if name == "" {
		return
	}
	childMu.Lock()
	fn := childs[name]
	childMu.Unlock()
	if fn == nil {
		fmt.Fprintf(os.Stderr, "testenv: no child %q is registered in this test binary\n", name)
		os.Exit(2)
	}
	os.Exit(fn())
}

// Child returns a command, not yet started, that re-executes the test binary
// as the registered child name with env (KEY=value) added to this process's
// environment. It runs no tests (-test.run=^$) and leads its own process
// group; when the test ends, the group is killed and the child waited for,
// unless the test waited for it already.
func Child(t testing.TB, name string, env ...string) *exec.Cmd {
	t.Helper()
	childMu.Lock()
	_, ok := childs[name]
	childMu.Unlock()
	if !ok {
		t.Fatalf("testenv: no child %q is registered (RegisterChild in an init function)", name)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envChildName+"="+name), env...)
	KillGroupAtCleanup(t, cmd)
	return cmd
}

// KillGroupAtCleanup makes cmd, not yet started, lead its own process group,
// and kills the group and waits for cmd when the test ends, if cmd was started
// and not waited for by then.
func KillGroupAtCleanup(t testing.TB, cmd *exec.Cmd) {
	setGroup(cmd)
	t.Cleanup(func() {
		if cmd.Process == nil || cmd.ProcessState != nil {
			return
		}
		killGroup(cmd)
		_ = cmd.Wait()
	})
}
