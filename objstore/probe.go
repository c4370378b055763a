package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const abortTimeout = 30 * time.Second

// Capabilities are the conditions a store enforces.
type Capabilities struct {
	PutIfAbsent       bool `json:"put_if_absent"`       // PUT If-None-Match: * (and racing creates have one winner)
	PutIfMatch        bool `json:"put_if_match"`        // PUT If-Match (and it never creates a missing key)
	DeleteIfMatch     bool `json:"delete_if_match"`     // DELETE If-Match
	CopyIfAbsent      bool `json:"copy_if_absent"`      // CopyObject destination If-None-Match: *
	CopyIfMatch       bool `json:"copy_if_match"`       // CopyObject destination If-Match
	MultipartIfAbsent bool `json:"multipart_if_absent"` // CompleteMultipartUpload If-None-Match: *
	MultipartIfMatch  bool `json:"multipart_if_match"`  // CompleteMultipartUpload If-Match
	// IfMatchUnquoted: the If-Match conditions above are enforced only with
	// the ETag sent unquoted (Ceph RGW 16.2), and a backend that can
	// (s3store) sends it so on this store (Condition.Unquoted).
	IfMatchUnquoted bool `json:"if_match_unquoted,omitempty"`
}

// ConditionalWrites reports whether the store can serve as a compare-and-swap
// register: write-once and If-Match on PUT are both enforced.
func (c Capabilities) ConditionalWrites() bool { return c.PutIfAbsent && c.PutIfMatch }

// ErrProbeFailed: the capability probe could not finish (the endpoint is
// unreachable, the bucket is missing, the credentials may not write, the
// network failed mid-way), so nothing is known about the conditions the store
// enforces and no conditional request that needed them was sent. It is never
// ErrAmbiguous: the writes whose outcome is unknown were the probe's scratch
// writes.
var ErrProbeFailed = errors.New("capability probe failed")

// ProbeOptions tune Probe. A nil *ProbeOptions means all defaults.
type ProbeOptions struct {
	// Racers is how many concurrent conditional writes race for one key in
	// each round of the racing checks. Default: 16.
	Racers int
	// Rounds is how many rounds each racing check runs; every round must have
	// exactly one winner (one round can miss a narrow race). Default: 3.
	Rounds int
	// Share also publishes the verdict in the bucket, at "<ProbePrefix>verdict.json"
	// from the bucket's root, after comparing it with the one found there
	// (ProbeReport.PreviousShared). It is a record for people and tools, never
	// taken in place of a probe (see "Probe verdicts" in the package doc).
	// Default: false (Probe leaves nothing in the bucket).
	Share bool
	// NoCache probes without saving the verdict anywhere. Default: false
	// (Store.Probe saves it in the local cache; see Options.ProbeTTL).
	NoCache bool
}

// ProbeCheckNames are the names of Probe's checks, in the order it runs them.
func ProbeCheckNames() []string {
	return []string{"put-if-absent", "put-if-match", "delete-if-match", "copy-if-absent", "copy-if-match",
		"multipart-if-absent", "multipart-if-match", "racing-creates", "racing-updates"}
}

// ProbeCheck is the outcome of one experiment.
type ProbeCheck struct {
	Name     string        `json:"name"`
	Enforced bool          `json:"enforced"`
	Outcome  string        `json:"outcome"` // what was observed, in words
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// ProbeReport is the result of Probe.
type ProbeReport struct {
	Store        string       `json:"store"`
	Checks       []ProbeCheck `json:"checks"`
	Capabilities Capabilities `json:"capabilities"`
	Racers       int          `json:"racers"`
	Rounds       int          `json:"rounds"`
	Winners      int          `json:"winners"`       // successful racing writes in the worst round (must be 1)
	LosersStatus []string     `json:"losers_status"` // what racing losers saw: "412", "409", "500" (5xx: an unknown outcome)
	// Findings are the server's quirks the probe met and cairn allows for,
	// in words: the answer to If-Match on a missing key, the If-Match form it
	// honours, what racing losers are told.
	Findings []string      `json:"findings,omitempty"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// PreviousShared is the verdict an earlier probe had left in the bucket, and
	// where it disagreed with this one (nil if there was none, or the verdict
	// was not saved).
	PreviousShared *SharedVerdict `json:"previous_shared,omitempty"`
}

// Probe proves by experiment which conditions the store's endpoint enforces. It
// writes scratch objects under "<ProbePrefix><random>/" and deletes them after.
// Checks: put-if-absent, put-if-match, delete-if-match, copy-if-absent,
// copy-if-match, multipart-if-absent, multipart-if-match and racing-creates
// (N concurrent if-absent writes of one key: exactly one may win) and
// racing-updates (the same with If-Match of one ETag). A condition is reported
// enforced only if a violating request failed with 412 (or 409) and left the
// object unchanged, and a request that meets it succeeded and took effect (a
// server that refuses both enforces nothing usable); "accepted and ignored",
// "rejected" and "refuses even a satisfying request" all count as not
// enforced. Errors that make the experiment meaningless (unreachable endpoint,
// missing bucket, bad credentials, a network fault mid-way) are returned as
// errors matching ErrProbeFailed (and the cause, such as ErrBucketNotFound,
// unless the cause is a scratch write of unknown outcome: never ErrAmbiguous).
// The verdict is saved as described under "Probe verdicts" in the package doc.
func Probe(ctx context.Context, s *Store, opts *ProbeOptions) (ProbeReport, error) {
	return s.Probe(ctx, opts)
}

type prober struct {
	b      Backend
	prefix string
	rep    *ProbeReport
	// unquoted: the probe's If-Match conditions carry the ETag bare (set
	// once put-if-match found only that form enforced). Per condition, never
	// on the backend: other users of it keep sending what their Store says.
	unquoted bool
}

// ifMatch is IfMatch(etag) in the form the probe is measuring.
func (p *prober) ifMatch(etag string) Condition {
	c := IfMatch(etag)
	c.Unquoted = p.unquoted
	return c
}

func runProbe(ctx context.Context, b Backend, basePrefix string, opts *ProbeOptions) (ProbeReport, error) {
	var o ProbeOptions
	if opts != nil {
		o = *opts
	}
	if o.Racers <= 0 {
		o.Racers = 16
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	rep := ProbeReport{Store: b.String(), Racers: o.Racers, Rounds: o.Rounds, Winners: 1}
	start := time.Now()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	p := &prober{b: b, prefix: basePrefix + hex.EncodeToString(rnd[:]) + "/", rep: &rep}
	defer p.cleanup(ctx)

	// A plain write first: if this fails, nothing else means anything.
	if _, err := b.Put(ctx, p.key("plain"), bytes.NewReader([]byte("cairn probe")), 11, PutOptions{ContentType: "text/plain"}); err != nil {
		return rep, &probeError{store: b.String(), what: "a plain write of a scratch key", cause: err}
	}
	checks := []struct {
		name string
		fn   func(context.Context) (bool, string, error)
		set  func(*Capabilities, bool)
	}{
		{"put-if-absent", p.putIfAbsent, func(c *Capabilities, v bool) { c.PutIfAbsent = v }},
		{"put-if-match", p.putIfMatch, func(c *Capabilities, v bool) { c.PutIfMatch = v }},
		{"delete-if-match", p.deleteIfMatch, func(c *Capabilities, v bool) { c.DeleteIfMatch = v }},
		{"copy-if-absent", p.copyCond(true), func(c *Capabilities, v bool) { c.CopyIfAbsent = v }},
		{"copy-if-match", p.copyCond(false), func(c *Capabilities, v bool) { c.CopyIfMatch = v }},
		{"multipart-if-absent", p.multipartCond(true), func(c *Capabilities, v bool) { c.MultipartIfAbsent = v }},
		{"multipart-if-match", p.multipartCond(false), func(c *Capabilities, v bool) { c.MultipartIfMatch = v }},
		{"racing-creates", p.racing(false), func(c *Capabilities, v bool) { c.PutIfAbsent = c.PutIfAbsent && v }},
		{"racing-updates", p.racing(true), func(c *Capabilities, v bool) { c.PutIfMatch = c.PutIfMatch && v }},
	}
	for _, c := range checks {
		t0 := time.Now()
		ok, outcome, err := c.fn(ctx)
		if err != nil {
			return rep, &probeError{store: b.String(), what: "check " + c.name, cause: err}
		}
		rep.Checks = append(rep.Checks, ProbeCheck{Name: c.name, Enforced: ok, Outcome: outcome, Elapsed: time.Since(t0)})
		c.set(&rep.Capabilities, ok)
	}
	if !rep.Capabilities.PutIfMatch && rep.Capabilities.IfMatchUnquoted {
		// Unquoted If-Match failed under races: back to the standard form,
		// in which no If-Match check was enforced.
		c := &rep.Capabilities
		c.IfMatchUnquoted, c.DeleteIfMatch, c.CopyIfMatch, c.MultipartIfMatch = false, false, false, false
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func (p *prober) key(name string) string { return p.prefix + name }

func (p *prober) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	cursor := ""
	for {
		page, err := p.b.List(ctx, p.prefix, cursor, ListOptions{PageSize: 1000})
		if err != nil {
			return
		}
		for _, e := range page.Entries {
			_ = p.b.Delete(ctx, e.Key, Condition{})
		}
		if page.Next == "" {
			return
		}
		cursor = page.Next
	}
}

func (p *prober) put(ctx context.Context, key, body string, cond Condition) (Info, error) {
	return p.b.Put(ctx, key, bytes.NewReader([]byte(body)), int64(len(body)), PutOptions{If: cond, ContentType: "text/plain"})
}

// refused classifies the error of a request that should have been refused by its
// condition. It returns (enforced, outcome, fatal error).
func (p *prober) refused(ctx context.Context, err error, what string) (bool, string, error) {
	switch {
	case err == nil:
		return false, "ignored: " + what + " succeeded", nil
	case errors.Is(err, ErrPreconditionFailed):
		return true, "enforced (412)", nil
	case errors.Is(err, ErrConflict):
		return true, "enforced (409)", nil
	default:
		if ferr := p.fatal(ctx, err); ferr != nil {
			return false, "", ferr
		}
		return false, "rejected: " + err.Error(), nil
	}
}

// fatal returns err if it may be a fault of the network or of the client
// rather than the server's answer to the request: an unknown outcome, a
// cancelled context, or a server that no longer answers a plain read (a
// request that never arrived must not be recorded as "rejected").
func (p *prober) fatal(ctx context.Context, err error) error {
	if errors.Is(err, ErrAmbiguous) || ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if _, herr := p.b.Head(ctx, p.key("plain")); herr != nil {
		return err
	}
	return nil
}

func (p *prober) unchanged(ctx context.Context, key, etag string) (bool, error) {
	info, err := p.b.Head(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.ETag == etag, nil
}

func (p *prober) putIfAbsent(ctx context.Context) (bool, string, error) {
	k := p.key("if-absent")
	first, err := p.put(ctx, k, "first", IfAbsent())
	if err != nil {
		if ferr := p.fatal(ctx, err); ferr != nil {
			return false, "", ferr
		}
		return false, "rejected: a create with If-None-Match: * of a free key failed: " + err.Error(), nil
	}
	_, err = p.put(ctx, k, "second", IfAbsent())
	ok, out, ferr := p.refused(ctx, err, "a second if-absent write")
	if ferr != nil || !ok {
		return false, out, ferr
	}
	if same, err := p.unchanged(ctx, k, first.ETag); err != nil || !same {
		return false, "ignored: the refused write changed the object anyway", err
	}
	return true, out, nil
}

// putIfMatch checks If-Match on PUT with the ETag quoted, as HTTP has it.
// A server that refuses even the current ETag in that form is tried with it
// unquoted (Condition.Unquoted): Ceph RGW 16.2 honours only that form. The
// later checks (delete, copy and multipart If-Match, racing updates) use the
// form that is enforced.
func (p *prober) putIfMatch(ctx context.Context) (bool, string, error) {
	ok, out, quotedRefused, err := p.putIfMatchOnce(ctx, "if-match")
	if err != nil || ok || !quotedRefused {
		return ok, out, err
	}
	p.unquoted = true
	ok2, out2, _, err := p.putIfMatchOnce(ctx, "if-match-unquoted")
	if err != nil || !ok2 {
		p.unquoted = false
		return ok, out, err
	}
	p.rep.Capabilities.IfMatchUnquoted = true
	p.finding("If-Match is honoured only with the ETag unquoted: the quoted form HTTP specifies is refused with 412 even when it matches; cairn sends it unquoted to this server")
	return true, out2 + ", with the ETag unquoted (the quoted form is refused even when it matches)", nil
}

// putIfMatchOnce runs the put-if-match experiment on scratch key name with
// the backend's current If-Match form. quotedRefused: the only failure was a
// 412 to the write with the current ETag.
func (p *prober) putIfMatchOnce(ctx context.Context, name string) (ok bool, out string, quotedRefused bool, err error) {
	k := p.key(name)
	cur, err := p.put(ctx, k, "v1", Condition{})
	if err != nil {
		return false, "", false, err
	}
	_, err = p.put(ctx, k, "v2-wrong", p.ifMatch(wrongETag))
	ok, out, ferr := p.refused(ctx, err, "a write with a wrong If-Match")
	if ferr != nil || !ok {
		return false, out, false, ferr
	}
	if same, err := p.unchanged(ctx, k, cur.ETag); err != nil || !same {
		return false, "ignored: the refused write changed the object anyway", false, err
	}
	if _, err := p.put(ctx, k, "v2", p.ifMatch(cur.ETag)); err != nil {
		ok, out, ferr := p.satisfyingFailed(ctx, "a write with the current ETag in If-Match", err)
		return ok, out, ferr == nil && errors.Is(err, ErrPreconditionFailed), ferr
	}
	if good, out, err := p.landed(ctx, k, "v2", "a write with the current ETag in If-Match"); !good {
		return false, out, false, err
	}
	missing := p.key(name + "-missing")
	_, err = p.put(ctx, missing, "x", p.ifMatch(cur.ETag))
	if ok2, _, ferr := p.refused(ctx, err, ""); ferr != nil {
		return false, "", false, ferr
	} else if !ok2 && !errors.Is(err, ErrNotFound) {
		if err == nil {
			return false, "ignored: If-Match on a missing key created it", false, nil
		}
		return false, "rejected: If-Match on a missing key: " + err.Error(), false, nil
	}
	p.finding("If-Match on a missing key answers " + answer(err))
	return true, out, false, nil
}

// finding records a quirk of the server that cairn allows for.
func (p *prober) finding(f string) { p.rep.Findings = append(p.rep.Findings, f) }

// answer names the status a refused request met: 412, 409 or 404.
func answer(err error) string {
	switch {
	case errors.Is(err, ErrPreconditionFailed):
		return "412 (precondition failed)"
	case errors.Is(err, ErrConflict):
		return "409 (conflict)"
	case errors.Is(err, ErrNotFound):
		return "404 (not found)"
	case err == nil:
		return "success"
	}
	return err.Error()
}

func (p *prober) deleteIfMatch(ctx context.Context) (bool, string, error) {
	k := p.key("delete-if-match")
	cur, err := p.put(ctx, k, "keep me", Condition{})
	if err != nil {
		return false, "", err
	}
	err = p.b.Delete(ctx, k, p.ifMatch(wrongETag))
	ok, out, ferr := p.refused(ctx, err, "a delete with a wrong If-Match")
	if ferr != nil {
		return false, out, ferr
	}
	same, herr := p.unchanged(ctx, k, cur.ETag)
	if herr != nil {
		return false, "", herr
	}
	if !same {
		return false, "ignored: a delete with a wrong If-Match deleted the object", nil
	}
	if !ok {
		return false, out, nil
	}
	if err := p.b.Delete(ctx, k, p.ifMatch(cur.ETag)); err != nil {
		return p.satisfyingFailed(ctx, "a delete with the current ETag", err)
	}
	if _, err := p.b.Head(ctx, k); !errors.Is(err, ErrNotFound) {
		if err != nil {
			return false, "", err
		}
		return false, "broken: a delete with the current ETag succeeded and left the object", nil
	}
	err = p.b.Delete(ctx, p.key("delete-if-match-missing"), p.ifMatch(cur.ETag))
	if ferr := p.fatal(ctx, err); err != nil && ferr != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrPreconditionFailed) {
		return false, "", ferr
	}
	p.finding("DELETE with If-Match on a missing key answers " + answer(err))
	return true, out, nil
}

// satisfyingFailed classifies the failure of a request that met its
// condition: a server that refuses those too enforces nothing usable (it is
// not "enforced" because it refuses everything).
func (p *prober) satisfyingFailed(ctx context.Context, what string, err error) (bool, string, error) {
	if ferr := p.fatal(ctx, err); ferr != nil {
		return false, "", ferr
	}
	return false, "broken: " + what + " failed: " + err.Error(), nil
}

// landed checks that a request that met its condition and succeeded stored
// want at key.
func (p *prober) landed(ctx context.Context, key, want, what string) (bool, string, error) {
	got, err := p.get(ctx, key)
	if err != nil {
		return false, "", err
	}
	if got != want {
		return false, "broken: " + what + " succeeded and did not store its content", nil
	}
	return true, "", nil
}

// copyCond returns the copy-if-absent or copy-if-match check: a copy onto a
// destination that fails the condition must be refused and leave it as it
// was, and one that meets it (onto a free key; with the current ETag) must
// succeed and store the source.
func (p *prober) copyCond(absent bool) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		name := map[bool]string{true: "copy-if-absent", false: "copy-if-match"}[absent]
		src, dst := p.key(name+"-src"), p.key(name+"-dst")
		if _, err := p.put(ctx, src, "source", Condition{}); err != nil {
			return false, "", err
		}
		cur, err := p.put(ctx, dst, "destination", Condition{})
		if err != nil {
			return false, "", err
		}
		cond := IfAbsent()
		if !absent {
			cond = p.ifMatch(wrongETag)
		}
		_, err = p.b.Copy(ctx, src, dst, cond)
		ok, out, ferr := p.refused(ctx, err, "a copy onto a destination that fails the condition")
		if ferr != nil {
			return false, out, ferr
		}
		same, herr := p.unchanged(ctx, dst, cur.ETag)
		if herr != nil {
			return false, "", herr
		}
		if !same {
			return false, "ignored: the copy overwrote the destination", nil
		}
		if !ok {
			return false, out, nil
		}
		target, cond, what := p.key(name+"-free"), IfAbsent(), "a copy onto a free key with If-None-Match: *"
		if !absent {
			target, cond, what = dst, p.ifMatch(cur.ETag), "a copy onto the destination with its current ETag"
		}
		if _, err := p.b.Copy(ctx, src, target, cond); err != nil {
			return p.satisfyingFailed(ctx, what, err)
		}
		if good, out, err := p.landed(ctx, target, "source", what); !good {
			return false, out, err
		}
		return true, out, nil
	}
}

// multipartCond returns the multipart-if-absent or multipart-if-match check:
// completing an upload that fails the condition must be refused and leave the
// object as it was, and completing one that meets it (on a free key; with the
// current ETag) must succeed and store the upload.
func (p *prober) multipartCond(absent bool) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		name := map[bool]string{true: "multipart-if-absent", false: "multipart-if-match"}[absent]
		k := p.key(name)
		cur, err := p.put(ctx, k, "existing", Condition{})
		if err != nil {
			return false, "", err
		}
		cond := IfAbsent()
		if !absent {
			cond = p.ifMatch(wrongETag)
		}
		err, setup, unsupported := p.completeUpload(ctx, k, "new", cond)
		if unsupported != nil {
			return false, "rejected: multipart uploads are not supported: " + unsupported.Error(), nil
		}
		if setup != nil {
			return false, "", setup
		}
		ok, out, ferr := p.refused(ctx, err, "completing an upload that fails the condition")
		if ferr != nil {
			return false, out, ferr
		}
		same, herr := p.unchanged(ctx, k, cur.ETag)
		if herr != nil {
			return false, "", herr
		}
		if !same {
			return false, "ignored: the completion replaced the object", nil
		}
		if !ok {
			return false, out, nil
		}
		target, cond, what := p.key(name+"-free"), IfAbsent(), "completing an upload of a free key with If-None-Match: *"
		if !absent {
			target, cond, what = k, p.ifMatch(cur.ETag), "completing an upload with the object's current ETag"
		}
		err, setup, unsupported = p.completeUpload(ctx, target, "new", cond)
		if setup != nil || unsupported != nil {
			return false, "", errors.Join(setup, unsupported)
		}
		if err != nil {
			return p.satisfyingFailed(ctx, what, err)
		}
		if good, out, err := p.landed(ctx, target, "new", what); !good {
			return false, out, err
		}
		return true, out, nil
	}
}

// completeUpload uploads body to key as a one-part multipart upload and
// completes it under cond. It returns the completion's error, or (setup) the
// error of a step before it, which makes the experiment meaningless, or
// (unsupported) the store's refusal of multipart uploads. A failed upload is
// aborted.
func (p *prober) completeUpload(ctx context.Context, key, body string, cond Condition) (err, setup, unsupported error) {
	id, err := p.b.CreateMultipart(ctx, key, PutOptions{ContentType: "text/plain"})
	if err != nil {
		if errors.Is(err, ErrNotSupported) && p.fatal(ctx, err) == nil {
			return nil, nil, err
		}
		return nil, err, nil
	}
	defer func() {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		_ = p.b.AbortMultipart(actx, key, id)
	}()
	part, err := p.b.UploadPart(ctx, key, id, 1, bytes.NewReader([]byte(body)), int64(len(body)))
	if err != nil {
		return nil, err, nil
	}
	_, err = p.b.CompleteMultipart(ctx, key, id, []Part{part}, cond)
	return err, nil, nil
}

// racing returns the racing-creates (If-None-Match: *) or racing-updates
// (If-Match of one ETag) check: Rounds rounds of Racers concurrent
// conditional writes of one key, each of which must have exactly one winner,
// whose write is the one stored. Several servers enforce a condition alone
// but not under races; the worst round is reported.
func (p *prober) racing(update bool) func(context.Context) (bool, string, error) {
	what := "if-absent"
	if update {
		what = "if-match"
	}
	return func(ctx context.Context) (bool, string, error) {
		n := p.rep.Racers
		// The rounds race on keys of their own, all at once: each is the
		// same experiment as alone (Racers writes of one key, exactly one
		// may win), and a server slow under contention (SeaweedFS takes
		// seconds a round) costs one round's time, not Rounds'.
		type result struct {
			k, winner, bad string
			winners        int
			statuses       map[string]bool
			err            error
		}
		results := make([]result, p.rep.Rounds)
		var wg sync.WaitGroup
		for round := range p.rep.Rounds {
			wg.Go(func() {
				r := &results[round]
				r.k, r.statuses = p.key(fmt.Sprintf("race-%s-%d", what, round)), map[string]bool{}
				cond := IfAbsent()
				if update {
					base, err := p.put(ctx, r.k, "base", Condition{})
					if err != nil {
						r.err = err
						return
					}
					cond = p.ifMatch(base.ETag)
				}
				r.winners, r.winner, r.bad, r.err = p.raceRound(ctx, r.k, cond, r.statuses)
			})
		}
		wg.Wait()
		statuses := map[string]bool{}
		for round, r := range results {
			k, winners, winner, bad, err := r.k, r.winners, r.winner, r.bad, r.err
			maps.Copy(statuses, r.statuses)
			if err != nil {
				return false, "", err
			}
			if winners != 1 && (p.rep.Winners == 1 || winners > p.rep.Winners) {
				p.rep.Winners = winners
			}
			switch {
			case winners == 0 && update:
				return false, fmt.Sprintf("refuses even the current ETag: none of %d concurrent if-match writes with the current ETag succeeded (round %d of %d)", n, round+1, p.rep.Rounds), nil
			case winners == 0:
				return false, fmt.Sprintf("refuses even a free key: none of %d concurrent if-absent creates of a free key succeeded (round %d of %d)", n, round+1, p.rep.Rounds), nil
			case winners != 1:
				return false, fmt.Sprintf("ignored under races: %d of %d concurrent %s writes succeeded (round %d of %d)", winners, n, what, round+1, p.rep.Rounds), nil
			}
			if bad != "" {
				return false, "broken: a racing loser failed with " + bad, nil
			}
			data, err := p.get(ctx, k)
			if err != nil {
				return false, "", err
			}
			if data != winner {
				return false, "broken: the stored object is not the winner's write", nil
			}
		}
		p.rep.LosersStatus = p.rep.LosersStatus[:0]
		var fivexx []string
		for _, s := range slices.Sorted(maps.Keys(statuses)) {
			p.rep.LosersStatus = append(p.rep.LosersStatus, s)
			if s >= "500" {
				fivexx = append(fivexx, s)
			}
		}
		if len(fivexx) > 0 {
			p.finding(fmt.Sprintf("racing %s losers are answered %s, not 412: cairn takes that answer as an unknown outcome (resolved as for a lost response), never as success or as a conflict", what, strings.Join(fivexx, ", ")))
		}
		return true, fmt.Sprintf("1 winner of %d in each of %d rounds; losers saw %v", n, p.rep.Rounds, p.rep.LosersStatus), nil
	}
}

// raceRound races Racers conditional writes of k and returns the number of
// winners, the winner's body, and a loser's unexpected error ("" if none).
func (p *prober) raceRound(ctx context.Context, k string, cond Condition, statuses map[string]bool) (int, string, string, error) {
	n := p.rep.Racers
	type result struct {
		body string
		err  error
		seen bool // a 5xx loser whose write a read-back found stored
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			body := fmt.Sprintf("racer %d", i)
			_, err := p.put(ctx, k, body, cond)
			seen := false
			if errors.Is(err, ErrAmbiguous) && serverStatus(err) >= 500 {
				// Resolve it as cairn does (by reading back): a write found
				// stored is one the caller will take as applied.
				if got, gerr := p.get(ctx, k); gerr == nil && got == body {
					seen = true
				}
			}
			results[i] = result{body, err, seen}
		})
	}
	close(start)
	wg.Wait()
	winners, winner, bad := 0, "", ""
	for _, r := range results {
		switch {
		case r.err == nil:
			winners++
			winner = r.body
		case errors.Is(r.err, ErrPreconditionFailed):
			statuses["412"] = true
		case errors.Is(r.err, ErrConflict):
			statuses["409"] = true
		case errors.Is(r.err, ErrAmbiguous) && serverStatus(r.err) >= 500 && r.seen:
			winners++ // applied, as its writer will conclude
		case errors.Is(r.err, ErrAmbiguous) && serverStatus(r.err) >= 500:
			// The server answered, with an error that does not say whether
			// the write was applied (Ceph RGW 16.2's racing If-Match
			// losers get 500). cairn takes such an answer as an unknown
			// outcome, as a lost response; here the stored object must
			// still be the one winner's.
			statuses[strconv.Itoa(serverStatus(r.err))] = true
		default:
			if ferr := p.fatal(ctx, r.err); ferr != nil {
				return 0, "", "", ferr
			}
			bad = r.err.Error()
		}
	}
	return winners, winner, bad, nil
}

func (p *prober) get(ctx context.Context, key string) (string, error) {
	rc, _, err := p.b.Get(ctx, key)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(rc)
	return buf.String(), err
}

// serverStatus is the HTTP status of the server's answer in err (0 if
// there was none): backends' errors carry it (HTTPStatusCode).
func serverStatus(err error) int {
	var sc interface{ HTTPStatusCode() int }
	if errors.As(err, &sc) {
		return sc.HTTPStatusCode()
	}
	return 0
}

// wrongETag is a syntactically valid ETag no real object has.
const wrongETag = "00000000000000000000000000000000"
