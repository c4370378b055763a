package faultproxy_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
)

// TestTCPBlackhole: while blackholed, the proxy forwards nothing and closes
// nothing (the client's read runs into its own deadline, not an error from
// the network), new connections hang too; once it ends, what was sent
// meanwhile arrives on the same connection.
func TestTCPBlackhole(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server, line by line
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	p, err := faultproxy.NewTCP(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(msg string, within time.Duration) (string, error) {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		return r.ReadString('\n')
	}
	if got, err := echo("one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before the blackhole: %q, %v", got, err)
	}
	p.Blackhole(true)
	if got, err := echo("two", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed: %q, %v; want the client's own deadline", got, err)
	}
	c2, err := net.Dial("tcp", p.Addr) // accepted, and hangs
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	p.Blackhole(false)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the blackhole: %q, %v; want what was sent meanwhile", got, err)
	}
}
