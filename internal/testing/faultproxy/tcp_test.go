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

// TestTCPBlackholeHoldsCloses: a client that closes its connection while
// blackholed does not close the server's end (a FIN on a dead route is
// lost too) until the blackhole ends.
func TestTCPBlackholeHoldsCloses(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ended := make(chan struct{})
	go func() { // echoes one line, then reports when the client's end closes
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		if line, err := r.ReadString('\n'); err == nil {
			_, _ = c.Write([]byte(line))
			_, _ = r.ReadString('\n') // returns once the client's end closes
		}
		close(ended)
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
	if _, err := c.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "one\n" {
		t.Fatalf("before the blackhole: %q, %v", got, err)
	}
	p.Blackhole(true)
	c.Close()
	select {
	case <-ended:
		t.Fatal("the client's close crossed the blackhole")
	case <-time.After(300 * time.Millisecond):
	}
	p.Blackhole(false)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's close did not arrive once the blackhole ended")
	}
}
