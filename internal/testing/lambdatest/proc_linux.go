package lambdatest

import (
	"bytes"
	"os"
	"strconv"
)

// stat returns the state and parent pid of process pid from /proc.
func stat(pid int) (state byte, ppid int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	return f[0][0], ppid, err == nil
}

// Alive reports whether process pid exists and is not a zombie (an exited
// process nobody has waited for yet, as an orphan is where the first process
// of a container does not reap).
func Alive(pid int) bool {
	state, _, ok := stat(pid)
	return ok && state != 'Z' && state != 'X'
}

// liveChildren returns the live processes whose parent is pid.
func liveChildren(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, ok := stat(c); ok && ppid == pid && state != 'Z' && state != 'X' {
			kids = append(kids, c)
		}
	}
	return kids
}
