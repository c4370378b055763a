package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Daemon runs a Pipeline with its HTTP endpoints and pull sources, and shuts
// them down in the order that loses nothing: stop taking deliveries (the HTTP
// server drains in-flight requests, sources stop fetching), then stop the
// pipeline (running handlers get their grace period). Beside them it runs
// periodic Jobs (an audit, see intake/auditjob) and, with a Retention, purges
// finished records; they stop when Run returns.
//
// This is the whole of `cairn serve`: the command only turns its flags into a
// Daemon (sources by URL through OpenSource, the audit through auditjob).
type Daemon struct {
	Pipeline *Pipeline
	// Listener serves the webhook, /healthz, /readyz and /metrics; nil serves
	// no HTTP.
	Listener net.Listener
	Webhook  WebhookOptions
	// Metrics serves GET /metrics (e.g. promhttp.HandlerFor); nil: not served.
	Metrics http.Handler
	// Extra routes mounted on the same server (e.g. a status page), may be nil.
	Extra   func(mux *http.ServeMux)
	Sources []Source
	Logger  *slog.Logger
	// Jobs run periodically until Run returns (see Job).
	Jobs []Job
	// Retention purges processed records older than this (ledger Purge,
	// without the dead ones) as Run starts and then every PurgeEvery; at
	// least ledger.MinPurgeAge. Default 0: never.
	Retention time.Duration
	// PurgeEvery is the interval between purges. Default DefaultPurgeEvery
	// (hourly).
	PurgeEvery time.Duration
}

// Run serves until ctx is done or a source fails, then shuts down. It returns
// the first source error, or nil after a clean shutdown.
func (d *Daemon) Run(ctx context.Context) error {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	jobs, err := d.jobs(log)
	if err != nil {
		return err
	}
	stopJobs := startJobs(ctx, log, jobs)
	defer stopJobs()
	pctx, stopPipeline := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipeline()
	pdone := make(chan error, 1)
	go func() { pdone <- d.Pipeline.Run(pctx) }()

	sctx, stopSources := context.WithCancel(ctx)
	defer stopSources()
	var failed error
	var failOnce sync.Once
	fail := func(err error) {
		failOnce.Do(func() { failed = err; stopSources() })
	}
	var srv *http.Server
	var wg sync.WaitGroup
	if d.Listener != nil {
		mux := d.Pipeline.Mux(d.Webhook, d.Metrics)
		if d.Extra != nil {
			d.Extra(mux)
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		wg.Go(func() {
			if err := srv.Serve(d.Listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fail(fmt.Errorf("intake: http server: %w", err))
			}
		})
		log.Info("listening", "addr", d.Listener.Addr().String(), "webhook", "POST /v1/events")
	}
	for _, s := range d.Sources {
		wg.Go(func() {
			log.Info("source started", "source", s.Name())
			if err := s.Run(sctx, d.Pipeline); err != nil && sctx.Err() == nil {
				fail(fmt.Errorf("intake: source %s: %w", s.Name(), err))
			}
		})
	}
	<-sctx.Done()
	log.Info("shutting down: no new deliveries; running handlers get their grace period")
	if srv != nil {
		shctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = srv.Shutdown(shctx)
		cancel()
	}
	wg.Wait()
	stopPipeline()
	if err := <-pdone; err != nil && failed == nil {
		failed = err
	}
	return failed
}
