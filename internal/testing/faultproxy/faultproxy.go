// Package faultproxy is an HTTP proxy for tests that puts the network's write
// faults between a client and a real server (MinIO, versitygw, …): requests
// lost before the server, responses lost after the server applied the
// request, and late-landing requests, where the client's connection is
// dropped (the client sees a reset, as after a timeout or a proxy's 502/504)
// and the proxy sends the request on to the server afterwards.
//
// Why not a TCP fault proxy such as Shopify's toxiproxy: it works on byte
// streams, one upstream link per client connection, so it cannot tell a PUT
// from a GET, and once the client's side is gone it has no whole request to
// deliver later. A late-landing request needs the request held as a unit past
// the client's disconnect, which only an HTTP-aware proxy can do. It is small:
// net/http/httputil's ReverseProxy does the forwarding.
//
// The proxy listens on 127.0.0.1 and forwards with the client's Host header,
// so signed requests (AWS SigV4) stay valid.
//
// For faults that are the network's alone, whatever the protocol, TCP is a
// byte-stream proxy (PostgreSQL, S3) that blackholes: it forwards nothing and
// closes nothing, so a client learns of the fault only by its own deadlines.
package faultproxy

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Fault is what happens to one request.
type Fault int

// The faults, for mutating requests (PUT, POST, DELETE) only.
const (
	None         Fault = iota
	LostRequest        // the connection is dropped; the server never sees it
	LostResponse       // the server applies it, then the connection is dropped
	LateApply          // the connection is dropped, then the server gets it
)

// Options configure the faults: per-request probabilities for mutating
// requests, and how late a late request lands.
type Options struct {
	Seed                                        uint64
	LostRequestRate, LostResponseRate, LateRate float64
	// A late request reaches the server LateDelay plus up to LateJitter after
	// the client's connection was dropped. Default jitter: 60ms.
	LateDelay, LateJitter time.Duration
	// StripConditions removes If-Match and If-None-Match from every request:
	// the server then behaves like one that accepts conditional headers and
	// ignores them. Only in front of a server that checks no signatures
	// (gofakes3): the headers are signed, so a signing server would refuse.
	StripConditions bool
}

// Stats count what the proxy did.
type Stats struct {
	Requests, LostRequests, LostResponses, Late, LateLanded int
}

// Proxy forwards to one server, injecting faults.
type Proxy struct {
	URL string // where clients connect: http://127.0.0.1:port

	target *url.URL
	rp     *httputil.ReverseProxy
	srv    *http.Server

	mu    sync.Mutex
	opts  Options
	rnd   *rand.Rand
	stats Stats
	late  sync.WaitGroup
}

// New starts a proxy in front of target (a base URL such as MinIO's).
func New(target string, opts Options) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: u}
	p.SetOptions(opts)
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // keep the signed Host header
		},
		ErrorLog: nil,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.URL = "http://" + ln.Addr().String()
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// SetOptions replaces the faults (e.g. none during a test's setup).
func (p *Proxy) SetOptions(o Options) {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.LateJitter <= 0 && o.LateDelay <= 0 {
		o.LateJitter = 60 * time.Millisecond
	}
	p.mu.Lock()
	p.opts, p.rnd = o, rand.New(rand.NewPCG(o.Seed, o.Seed^0x5851f42d4c957f2d))
	p.mu.Unlock()
}

// Stats returns what the proxy did so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Wait blocks until every late request has reached the server and been
// answered.
func (p *Proxy) Wait() {
	// The client learns of a late request only through a dropped connection,
	// which orders nothing for the race detector: taking mu orders this Wait
	// after the Add made under it.
	p.mu.Lock()
	//lint:ignore SA2001 an empty critical section is the point: it orders Wait after Add
	p.mu.Unlock()
	p.late.Wait()
}

// Close waits for late requests and stops the proxy.
func (p *Proxy) Close() {
	p.Wait()
	_ = p.srv.Close()
}

func (p *Proxy) decide(r *http.Request) (Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Requests++
	if r.Method != http.MethodPut && r.Method != http.MethodPost && r.Method != http.MethodDelete {
		return None, 0
	}
	o, x := p.opts, p.rnd.Float64()
	switch {
	case x < o.LostRequestRate:
		p.stats.LostRequests++
		return LostRequest, 0
	case x < o.LostRequestRate+o.LostResponseRate:
		p.stats.LostResponses++
		return LostResponse, 0
	case x < o.LostRequestRate+o.LostResponseRate+o.LateRate:
		p.stats.Late++
		p.late.Add(1) // under mu, so a Wait that follows sees it (see Wait)
		d := o.LateDelay
		if o.LateJitter > 0 {
			d += time.Duration(p.rnd.Int64N(int64(o.LateJitter) + 1))
		}
		return LateApply, d
	}
	return None, 0
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	strip := p.opts.StripConditions
	p.mu.Unlock()
	if strip {
		r.Header.Del("If-Match")
		r.Header.Del("If-None-Match")
	}
	f, delay := p.decide(r)
	if f == None {
		p.rp.ServeHTTP(w, r)
		return
	}
	// The whole request is read first, as a server would before applying it.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		drop(w)
		return
	}
	// A request of its own, sharing nothing with r, which the server reuses
	// once this handler returns.
	out, err := http.NewRequestWithContext(context.Background(), r.Method, r.URL.String(), bytes.NewReader(body))
	if err != nil {
		drop(w)
		return
	}
	out.Header = r.Header.Clone()
	out.Host, out.RemoteAddr, out.RequestURI = r.Host, r.RemoteAddr, r.RequestURI
	switch f {
	case LostRequest:
		drop(w)
	case LostResponse:
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, out)
		drop(w)
	case LateApply:
		drop(w)
		go func() {
			defer p.late.Done()
			time.Sleep(delay)
			rec := httptest.NewRecorder()
			p.rp.ServeHTTP(rec, out)
			if rec.Code < 300 {
				p.mu.Lock()
				p.stats.LateLanded++
				p.mu.Unlock()
			}
		}()
	}
}
