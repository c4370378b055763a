package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// TCP is a byte-stream proxy for tests that can blackhole the network
// between a client and a server (PostgreSQL, MinIO): while blackholed it
// forwards nothing in either direction and keeps every connection open,
// accepting new ones too, as a dropped route or a hung NAT does. Nothing
// errors: a client learns of the fault only by its own deadlines. Bytes sent
// meanwhile wait and flow on once the blackhole ends (as TCP's
// retransmissions deliver them after a route comes back), and so does a
// close: a client that gives up on a blackholed connection and closes it
// leaves the server's end open (PostgreSQL keeps its session, its
// transaction and its row locks) until the blackhole ends or the proxy
// closes, as a FIN or RST lost on a dead route does.
//
// It listens on 127.0.0.1; Addr is host:port for the client's URL.
type TCP struct {
	Addr string

	target string
	ln     net.Listener

	mu     sync.Mutex
	open   chan struct{} // closed while forwarding; replaced while blackholed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewTCP starts a proxy forwarding to target (host:port).
func NewTCP(target string) (*TCP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &TCP{Addr: ln.Addr().String(), target: target, ln: ln, open: open, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Blackhole stops (on) or resumes (off) forwarding.
func (p *TCP) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open: // forwarding
		if on {
			p.open = make(chan struct{})
		}
	default:
		if !on {
			close(p.open)
		}
	}
}

// gate returns a channel closed once forwarding is allowed.
func (p *TCP) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// Close stops the proxy and closes every connection (a blackhole ends).
func (p *TCP) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.Blackhole(false)
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *TCP) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCP) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			<-p.gate() // a blackholed route does not even connect
			up, err := net.Dial("tcp", p.target)
			if err != nil || !p.track(up) {
				_ = c.Close()
				return
			}
			var mu sync.Mutex
			halves := 0
			end := func(half bool) {
				mu.Lock()
				defer mu.Unlock()
				if halves++; !half || halves == 2 {
					_ = c.Close()
					_ = up.Close()
				}
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); end(p.pipe(up, c)) }()
			go func() { defer p.wg.Done(); end(p.pipe(c, up)) }()
		}()
	}
}

// pipe copies from src to dst, holding each chunk while blackholed, and
// reports whether src ended cleanly (dst's write side is then closed).
func (p *TCP) pipe(dst, src net.Conn) (halfClosed bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			<-p.gate() // a close crosses a blackhole no more than bytes do
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				return tc.CloseWrite() == nil
			}
			return false
		}
	}
}
