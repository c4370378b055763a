package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// A Job is periodic work a Daemon runs beside its sources until Run returns:
// the purge of finished records (Daemon.Retention) is one, an audit of the
// bucket against the ledger (package intake/auditjob) another.
//
// A Job's Run is called every Every, one call at a time (a run that outlasts
// Every delays the next, never overlaps it), and is given a context that ends
// when the daemon's does. An error is logged at warning level as "NAME
// failed" and the job runs again at its next tick; errors after the context
// ended are not logged. Run logs its own successes.
type Job struct {
	// Name labels the job in logs ("audit", "purge"). Required.
	Name string
	// Every is the interval between runs. Required, positive.
	Every time.Duration
	// AtStart runs the job once as the daemon starts, before the first
	// interval. Default false: the first run is after Every.
	AtStart bool
	// Run does the work. Required.
	Run func(ctx context.Context) error
}

// DefaultPurgeEvery is how often a Daemon with a Retention purges when
// Daemon.PurgeEvery is zero.
const DefaultPurgeEvery = time.Hour

func (j Job) check() error {
	if j.Name == "" || j.Every <= 0 || j.Run == nil {
		return fmt.Errorf("intake: job %q needs a Name, a positive Every and a Run function; fix the Daemon's Jobs", j.Name)
	}
	return nil
}

// loop runs j until ctx is done.
func (j Job) loop(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(j.Every)
	defer t.Stop()
	if !j.AtStart {
		if !tick(ctx, t) {
			return
		}
	}
	for {
		if err := j.Run(ctx); err != nil && ctx.Err() == nil {
			log.Warn(j.Name+" failed", "err", err)
		}
		if !tick(ctx, t) {
			return
		}
	}
}

// tick waits for t's next tick; false once ctx is done.
func tick(ctx context.Context, t *time.Ticker) bool {
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jobs returns the daemon's periodic jobs, the purge included.
func (d *Daemon) jobs(log *slog.Logger) ([]Job, error) {
	var js []Job
	if d.Retention < 0 || d.PurgeEvery < 0 {
		return nil, errors.New("intake: Daemon.Retention and Daemon.PurgeEvery must not be negative (0: never purge, and hourly)")
	}
	if d.Retention > 0 && d.Retention < ledger.MinPurgeAge {
		return nil, fmt.Errorf("intake: Daemon.Retention %s is under ledger.MinPurgeAge (%s), which the fencing tokens of purged keys rest on: give at least %s (e.g. 30 days), or 0 to never purge", d.Retention, ledger.MinPurgeAge, ledger.MinPurgeAge)
	}
	if d.Retention > 0 {
		every := d.PurgeEvery
		if every == 0 {
			every = DefaultPurgeEvery
		}
		l, retention := d.Pipeline.l, d.Retention
		js = append(js, Job{Name: "purge", Every: every, AtStart: true, Run: func(ctx context.Context) error {
			n, err := l.Purge(ctx, time.Now().Add(-retention), false)
			if err == nil && n > 0 {
				log.Info("purged finished records", "records", n, "older_than", retention)
			}
			return err
		}})
	}
	for _, j := range d.Jobs {
		if err := j.check(); err != nil {
			return nil, err
		}
		js = append(js, j)
	}
	return js, nil
}

// startJobs runs js until ctx is done; the returned func cancels them and
// waits for them to return.
func startJobs(ctx context.Context, log *slog.Logger, js []Job) (stop func()) {
	jctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, j := range js {
		wg.Go(func() { j.loop(jctx, log) })
	}
	return func() { cancel(); wg.Wait() }
}
