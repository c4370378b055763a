package sandbox

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// children returns the live processes whose parent is pid.
func children(pid int) []int {
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
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(data[i+1:])
		if len(f) < 2 || len(f[0]) != 1 || f[0][0] == 'Z' || f[0][0] == 'X' {
			continue
		}
		if ppid, err := strconv.Atoi(string(f[1])); err == nil && ppid == pid {
			kids = append(kids, c)
		}
	}
	return kids
}

func stop(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) }
