package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// RSSOptions configures RSS. Zero fields take the defaults.
type RSSOptions struct {
	// Cairn is the cairn binary run as `cairn serve`. Required.
	Cairn string
	// Sizes are the ledger sizes measured, in records (default 20,000,
	// 200,000 and 2,000,000). The baseline, an empty ledger, always runs.
	Sizes []int
	// Dir holds the ledgers (default: a temporary directory, removed after).
	Dir string
	// Duration is how long each serve runs under load after start-up
	// (default 20s).
	Duration time.Duration
	// Rate is the trickle of webhook events per second (default 50); every
	// other one overwrites a recorded key, the rest are new keys.
	Rate int
	// Views is status page and API requests per second (default 4).
	Views int
	// Keep keeps each filled ledger in Dir (ledger-N.db) and reuses one
	// found there instead of filling it again; serve runs on a copy.
	Keep bool
	// Progress, if set, is told each phase.
	Progress func(phase string)
}

// The mix of a filled ledger: of every 100 records, this many are dead
// letters and this many pending; the rest are processed.
const (
	rssDeadPer100    = 5
	rssPendingPer100 = 1
)

// rssErrors are the dead letters' causes: a few classes, each with numbers
// and ids that differ record by record, as handlers' errors do.
var rssErrors = []func(i int) string{
	func(i int) string {
		return fmt.Sprintf("exit status 1: convert: no decode delegate for this image format `k/%08d.jpg'", i)
	},
	func(i int) string {
		return fmt.Sprintf("POST http://thumbs.internal:8080/render: dial tcp 10.0.%d.%d:8080: connect: connection refused", i%250, i%7)
	},
	func(i int) string {
		return fmt.Sprintf("context deadline exceeded after %dms (request id %x)", 30000+i%977, i*7919)
	},
	func(i int) string {
		return fmt.Sprintf("422 Unprocessable Entity: field \"width\" is %d, want at most 8192", 8193+i%4000)
	},
	func(i int) string {
		return fmt.Sprintf("panic: runtime error: index out of range [%d] with length %d\n\ngoroutine 1 [running]:\nmain.main()", i%64, i%64)
	},
}

// rssSample is one reading of a process's memory, in bytes.
type rssSample struct {
	rss, hwm, anon, file int64
}

// RSS measures `cairn serve`'s resident memory against the size of its
// SQLite ledger. For each size it fills a ledger (mostly processed records,
// some dead letters, some pending: rssDeadPer100 and rssPendingPer100),
// starts the real binary on it with an HTTP handler that answers at once,
// and for Duration posts a trickle of webhook events (new keys and newer
// versions of recorded ones) and reads the status page and its API (the
// first page, the next page of dead letters, a group, a prefix), sampling
// /proc/PID/status. Steady RSS is the median VmRSS over the second half of
// the load; peak is VmHWM at the end. The baseline is the same serve and
// load on an empty ledger, so each ratio says what the records cost.
func RSS(ctx context.Context, opts RSSOptions) ([]Result, error) {
	if opts.Cairn == "" {
		return nil, errors.New("bench: RSSOptions.Cairn (the cairn binary) is required")
	}
	if len(opts.Sizes) == 0 {
		opts.Sizes = []int{20000, 200000, 2000000}
	}
	if opts.Duration <= 0 {
		opts.Duration = 20 * time.Second
	}
	if opts.Rate <= 0 {
		opts.Rate = 50
	}
	if opts.Views <= 0 {
		opts.Views = 4
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	dir := opts.Dir
	if dir == "" && opts.Keep {
		return nil, errors.New("bench: RSSOptions.Keep needs a Dir to keep the ledgers in")
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "cairn-bench-rss-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.Close()

	type run struct {
		n            int
		steady, peak rssSample
		heap         float64 // the Go heap in use at the end, bytes
		fill         time.Duration
		fileSize     int64
	}
	measure := func(n int) (run, error) {
		r := run{n: n}
		filled := filepath.Join(dir, fmt.Sprintf("ledger-%d.db", n))
		if _, err := os.Stat(filled); err != nil || !opts.Keep {
			start := time.Now()
			progress(fmt.Sprintf("filling a ledger of %d records", n))
			// Under another name until it is whole: a fill cut short is
			// not reused.
			partial := filled + ".partial"
			removeSQLite(partial)
			if err := fillRSSLedger(ctx, partial, n); err != nil {
				removeSQLite(partial)
				return r, fmt.Errorf("filling %d records: %w", n, err)
			}
			if err := os.Rename(partial, filled); err != nil {
				return r, err
			}
			r.fill = time.Since(start)
		}
		path := filled
		if opts.Keep {
			// serve changes its ledger: it runs on a copy.
			path = filepath.Join(dir, "serve.db")
			if err := copyFile(filled, path); err != nil {
				return r, err
			}
		}
		if fi, err := os.Stat(path); err == nil {
			r.fileSize = fi.Size()
		}
		progress(fmt.Sprintf("cairn serve on %d records for %s", n, opts.Duration))
		var err error
		r.steady, r.peak, r.heap, err = runRSSServe(ctx, opts, path, n, sink.URL)
		// The next size's ledger needs the disk more than this one.
		removeSQLite(path)
		return r, err
	}
	base, err := measure(0)
	if err != nil {
		return nil, fmt.Errorf("baseline (empty ledger): %w", err)
	}
	mb := func(b int64) float64 { return float64(b) / 1e6 }
	var results []Result
	for _, n := range opts.Sizes {
		r, err := measure(n)
		if err != nil {
			return results, err
		}
		desc := func(s rssSample) string {
			return fmt.Sprintf("%.0f MB anonymous, %.0f MB file-backed", mb(s.anon), mb(s.file))
		}
		steady := NewResult(fmt.Sprintf("cairn serve steady RSS, %d records (%d%% dead, %d%% pending), %d events/s and %d status views/s for %s", n, rssDeadPer100, rssPendingPer100, opts.Rate, opts.Views, opts.Duration),
			"MB", mb(base.steady.rss), mb(r.steady.rss))
		steady.Lower = true
		steady.BaselineDesc = "the same serve and load on an empty ledger: " + desc(base.steady)
		steady.CairnDesc = desc(r.steady)
		filled := "reused"
		if r.fill > 0 {
			filled = "filled in " + r.fill.Round(100*time.Millisecond).String()
		}
		steady.Note = fmt.Sprintf("median VmRSS over the second half of the load; Go heap in use at the end %.0f MB (baseline %.0f MB); ledger file %.0f MB, %s",
			r.heap/1e6, base.heap/1e6, mb(r.fileSize), filled)
		peak := NewResult(fmt.Sprintf("cairn serve peak RSS, %d records", n), "MB", mb(base.peak.hwm), mb(r.peak.hwm))
		peak.Lower = true
		peak.BaselineDesc = "empty ledger, VmHWM"
		peak.CairnDesc = "VmHWM, start-up and load"
		results = append(results, steady, peak)
	}
	return results, nil
}

// sinkServer is the handler serve posts each claim to: it answers 204 at once.
type sinkServer struct {
	*http.Server
	URL string
}

func startSink() (*sinkServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sinkServer{Server: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}, URL: "http://" + ln.Addr().String() + "/"}
	go s.Serve(ln)
	return s, nil
}

// rssSeq is the sequencer of the i-th version: fixed width, so later is
// greater.
func rssSeq(i int64) string { return fmt.Sprintf("%016X", i) }

// rssKey is the key of the filled ledger's i-th record: in key order, so
// that the fill appends to the ledger's indexes, a thousand a folder.
func rssKey(i int) string { return fmt.Sprintf("photos/%05d/%08d.jpg", i/1000, i) }

// fillRSSLedger makes a SQLite ledger at path of n records through the
// ledger's own API, in batches: RecordAndClaim, then CompleteBatch (Fail for
// a dead letter), and the pending share, the last records, Record only.
func fillRSSLedger(ctx context.Context, path string, n int) error {
	// synchronous=normal: the fill need not survive a power cut.
	l, err := ledger.Open(ctx, "sqlite://"+filepath.ToSlash(path)+"?synchronous=normal", &ledger.Options{MaxAttempts: 1})
	if err != nil {
		return err
	}
	defer l.Close()
	const batch = 5000
	settled := n - n*rssPendingPer100/100
	for from, to := 0, 0; from < n; from = to {
		to = min(from+batch, n)
		if from < settled {
			to = min(to, settled)
		}
		evs := make([]event.Event, 0, to-from)
		for i := from; i < to; i++ {
			evs = append(evs, event.Event{Bucket: "media", Key: rssKey(i), Sequencer: rssSeq(1 << 32), ETag: fmt.Sprintf("%032x", uint64(i)*2654435761),
				Size: int64(1000 + i%500000), Kind: event.Created, Name: "ObjectCreated:Put"})
		}
		if from >= settled {
			if _, err := l.Record(ctx, "webhook", evs); err != nil {
				return err
			}
			continue
		}
		_, cs, err := l.RecordAndClaim(ctx, "webhook", evs, len(evs), time.Hour)
		if err != nil {
			return err
		}
		if len(cs) != len(evs) {
			return fmt.Errorf("claimed %d of a batch of %d", len(cs), len(evs))
		}
		var done, dead []ledger.Claim
		for j, c := range cs {
			if (from+j)%100 < rssDeadPer100 {
				dead = append(dead, c)
			} else {
				done = append(done, c)
			}
		}
		// Fails from many goroutines: the ledger commits them in groups.
		if err := ForEach(ctx, len(dead), 64, func(j int) error {
			i := from + j/rssDeadPer100*100 + j%rssDeadPer100
			return l.Fail(ctx, dead[j], rssErrors[i%len(rssErrors)](i), false)
		}); err != nil {
			return err
		}
		results := make([]string, len(done))
		for j := range results {
			results[j] = "ok"
		}
		errs, err := l.CompleteBatch(ctx, done, results)
		if err != nil {
			return err
		}
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	return l.Flush(ctx)
}

// runRSSServe runs `cairn serve` on the ledger at path (n records) under
// opts' load and returns its steady and peak memory and its Go heap in use
// at the end.
func runRSSServe(ctx context.Context, opts RSSOptions, path string, n int, sinkURL string) (steady, peak rssSample, heap float64, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	addr := ln.Addr().String()
	ln.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(opts.Cairn, "serve", "--ledger", path, "--listen", addr, "--handler-http", sinkURL, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err = cmd.Start(); err != nil {
		return
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if err != nil {
			err = fmt.Errorf("%w (cairn serve said: %s)", err, strings.TrimSpace(stderr.String()))
		}
	}()
	base := "http://" + addr
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()
	if err = waitHealthy(ctx, client, base, exited); err != nil {
		return
	}
	pid := cmd.Process.Pid
	lctx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	loadErr := make(chan error, 2)
	go func() { loadErr <- postTrickle(lctx, client, base, n, opts.Rate) }()
	go func() { loadErr <- viewStatus(lctx, client, base, n, opts.Views) }()
	var samples []rssSample
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
sampling:
	for {
		select {
		case <-lctx.Done():
			break sampling
		case err = <-loadErr:
			if err != nil {
				return
			}
			loadErr <- nil // the other's
		case e := <-exited:
			exited <- e
			err = fmt.Errorf("cairn serve exited: %v", e)
			return
		case <-tick.C:
			s, e := readProcStatus(pid)
			if e != nil {
				err = e
				return
			}
			if time.Since(start) >= opts.Duration/2 {
				samples = append(samples, s)
			}
		}
	}
	for range 2 {
		if e := <-loadErr; e != nil && !errors.Is(e, context.DeadlineExceeded) {
			err = e
			return
		}
	}
	if heap, err = scrapeMetric(ctx, client, base+"/metrics", "go_memstats_heap_inuse_bytes"); err != nil {
		return
	}
	if peak, err = readProcStatus(pid); err != nil {
		return
	}
	if len(samples) == 0 {
		samples = append(samples, peak)
	}
	med := func(f func(rssSample) int64) int64 {
		v := make([]int64, len(samples))
		for i, s := range samples {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	steady = rssSample{rss: med(func(s rssSample) int64 { return s.rss }), anon: med(func(s rssSample) int64 { return s.anon }),
		file: med(func(s rssSample) int64 { return s.file }), hwm: peak.hwm}
	return
}

// waitHealthy waits until serve answers /healthz.
func waitHealthy(ctx context.Context, client *http.Client, base string, exited chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case e := <-exited:
			exited <- e
			return fmt.Errorf("cairn serve exited before it answered /healthz: %v", e)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cairn serve did not answer /healthz within 2 minutes: %v", err)
		}
	}
}

// postTrickle posts rate webhook events a second until ctx ends: every
// other one a newer version of a recorded key (of n), the rest new keys.
func postTrickle(ctx context.Context, client *http.Client, base string, n, rate int) error {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	run := time.Now().UnixNano()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		ev := event.Event{Bucket: "media", Key: fmt.Sprintf("incoming/%d/%08d.jpg", run, i), Sequencer: rssSeq(1<<32 + int64(i) + 1),
			ETag: fmt.Sprintf("%032x", run+int64(i)), Size: 2048, Kind: event.Created, Name: "ObjectCreated:Put"}
		if n > 0 && i%2 == 0 {
			ev.Key = rssKey(int(uint64(i) * 2654435761 % uint64(n)))
		}
		req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/events", bytes.NewReader(minioBody(ev)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if err := do(client, req); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("webhook: %w", err)
		}
	}
}

// viewStatus reads the status page and its API views a second until ctx
// ends, in turn: the API, the first page, the next page of dead letters, a
// group's dead letters, a folder of the n records' keys.
func viewStatus(ctx context.Context, client *http.Client, base string, n, views int) error {
	tick := time.NewTicker(time.Second / time.Duration(views))
	defer tick.Stop()
	var next, class string
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		u := base + "/api/v1/status"
		switch i % 5 {
		case 1:
			u = base + "/"
		case 2:
			u = base + "/?after=" + url.QueryEscape(next)
		case 3:
			u = base + "/?error=" + url.QueryEscape(class)
		case 4:
			u = base + fmt.Sprintf("/?prefix=photos/%05d/", i*7919%max(1, n/1000))
		}
		req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("GET %s: %w", u, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("GET %s: %w", u, err)
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("GET %s: %s: %.300s", u, resp.Status, body)
		}
		if i%5 == 0 {
			var st struct {
				DeadNext   string `json:"dead_next"`
				DeadGroups []struct {
					Class string `json:"class"`
				} `json:"dead_groups"`
			}
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("GET %s: %w", u, err)
			}
			next, class = st.DeadNext, ""
			if len(st.DeadGroups) > 0 {
				class = st.DeadGroups[0].Class
			}
		}
	}
}

// do sends req and wants a 2xx.
func do(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

// readProcStatus reads a process's memory from /proc/PID/status (Linux).
func readProcStatus(pid int) (rssSample, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return rssSample{}, fmt.Errorf("reading the process's memory (Linux's /proc only): %w", err)
	}
	defer f.Close()
	var s rssSample
	fields := map[string]*int64{"VmRSS:": &s.rss, "VmHWM:": &s.hwm, "RssAnon:": &s.anon, "RssFile:": &s.file}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[2] == "kB" {
			if p := fields[fs[0]]; p != nil {
				v, err := strconv.ParseInt(fs[1], 10, 64)
				if err != nil {
					return rssSample{}, fmt.Errorf("/proc/%d/status: %q: %w", pid, sc.Text(), err)
				}
				*p = v * 1024
			}
		}
	}
	if err := sc.Err(); err != nil {
		return rssSample{}, err
	}
	if s.rss == 0 || s.hwm == 0 {
		return rssSample{}, fmt.Errorf("/proc/%d/status holds no VmRSS or VmHWM", pid)
	}
	return s, nil
}

// scrapeMetric reads one unlabelled metric from a Prometheus text endpoint.
func scrapeMetric(ctx context.Context, client *http.Client, u, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no metric %s", u, name)
}

// removeSQLite removes a SQLite file and its WAL and shared-memory files.
func removeSQLite(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		os.Remove(p)
	}
}

// copyFile copies the file at from to to.
func copyFile(from, to string) error {
	removeSQLite(to)
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
