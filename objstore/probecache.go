package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Why a Store never trusts the verdict shared in the bucket (the package
// doc's Probe verdicts):
//
// The verdict in the bucket is never trusted: it is a record, not an input.
// Anyone who may write the bucket's probe prefix can write it, and everyone
// who runs the probe needs exactly that permission, so it cannot tell a probe
// from a forgery; and nothing a client can check cheaply (a format, a
// conditional write, the Last-Modified date) proves a probe wrote it. Trusting
// a false "enforced" would make cairn rely on conditions the server ignores
// and lose updates silently; a false "not enforced" would switch documents to
// the register layout and make them read as missing. Both are worse than one
// probe per machine per day. So a Store decides only from its own probe or the
// verdict its own user saved locally; the bucket's copy tells people and tools
// what the last probe found (read-only users can read it), and each new probe
// compares itself with it ([ProbeReport].PreviousShared names the checks on
// which they disagree: the server changed, or the shared verdict was false)
// before replacing it.

// DefaultProbeTTL is how long a saved probe verdict is reused by default.
const DefaultProbeTTL = 24 * time.Hour

// verdictFormat is the version of the saved verdict's JSON.
const verdictFormat = 1

// ServerIdentifier is implemented by backends whose probe verdict can be saved
// and reused across processes (package s3store). Backends that enforce conditions
// themselves declare them instead. A Store finds it through wrappers that
// do not change what the server enforces (Prefixed, objstore/metrics,
// objstore/policy: see Wrapper); a wrapper that changes what the server seems
// to enforce (objstore/faulty) has no Unwrap, so nothing is saved for it.
type ServerIdentifier interface {
	// ServerLocation names, without a request, the endpoint and bucket that
	// requests go to. It keys saved verdicts.
	ServerLocation() ServerLocation
	// ServerSoftware asks the server, with one read request, what it calls
	// itself (the Server response header) or, if it sends none, what else in
	// its answer names its software (for s3: the names of its vendor
	// headers); "" if nothing does: such a server cannot be identified, and
	// no saved verdict is reused for it.
	ServerSoftware(ctx context.Context) (string, error)
}

// ServerLocation is where a probe verdict was measured.
type ServerLocation struct {
	Endpoint string `json:"endpoint"` // e.g. "http://127.0.0.1:9000", or "aws:us-east-1"
	Bucket   string `json:"bucket"`
}

func (l ServerLocation) cacheName() string {
	sum := sha256.Sum256([]byte(l.Endpoint + "\n" + l.Bucket))
	return hex.EncodeToString(sum[:16]) + ".json"
}

// ProbeVerdict is a saved probe result: the report, the server it was
// measured on, and when (the prober's clock).
type ProbeVerdict struct {
	Format int `json:"format"`
	ServerLocation
	Server   string      `json:"server"` // the Server response header then
	ProbedAt time.Time   `json:"probed_at"`
	Report   ProbeReport `json:"report"`
}

// SharedVerdict describes the verdict another probe had left in the bucket,
// as a probe found it before replacing it.
type SharedVerdict struct {
	ServerLocation
	Server string `json:"server"`
	// Written is the verdict object's Last-Modified (the server's clock).
	Written time.Time `json:"written"`
	// Disagree names the checks on which it said the opposite of this probe.
	Disagree []string `json:"disagree,omitempty"`
}

// identityOf returns the ServerIdentifier behind b, looking through wrappers
// (Wrapper: key prefixes, metrics, a write policy), none of which changes
// what the server enforces.
func identityOf(b Backend) (ServerIdentifier, bool) {
	for {
		if id, ok := b.(ServerIdentifier); ok {
			return id, true
		}
		w, ok := b.(Wrapper)
		if !ok {
			return nil, false
		}
		b = w.Unwrap()
	}
}

// rootOf returns b without key prefixes: the backend under the innermost
// prefix, which addresses the bucket itself (wrappers above that prefix are
// left out; b itself if there is no prefix).
func rootOf(b Backend) Backend {
	root := b
	for {
		if inner, ok := unprefixed(b); ok {
			root, b = inner, inner
			continue
		}
		w, ok := b.(Wrapper)
		if !ok {
			return root
		}
		b = w.Unwrap()
	}
}

func defaultProbeCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "cairn", "probe")
}

// cacheOn reports whether verdicts are saved and reused.
func (s *Store) cacheOn() bool { return s.ident != nil && s.opts.ProbeTTL >= 0 }

// serverSoftware asks the server who it is, once per Store.
func (s *Store) serverSoftware(ctx context.Context) (string, error) {
	if s.server != nil {
		return *s.server, nil
	}
	sw, err := s.ident.ServerSoftware(ctx)
	if err != nil {
		return "", err
	}
	s.server = &sw
	return sw, nil
}

// freshVerdict returns the locally saved verdict for this server if it is
// younger than the TTL, names the same endpoint and bucket, the server can be
// identified and still calls itself what it did then, and it still refuses
// what the verdict says it refuses (stillEnforced). Any doubt is "no
// verdict": the caller probes.
//
// Why both: the same address can answer with other software (a server
// replaced behind a load balancer or a port forward, a proxy that drops
// conditional headers put in front), and a name proves little: Ceph RGW and
// s3rver send no Server header, and a proxy keeps the header of the server
// behind it. A verdict trusted for the wrong server makes cairn rely on
// conditions nobody enforces and lose writes silently; one check of a few
// requests costs far less than that, and far less than a probe.
func (s *Store) freshVerdict(ctx context.Context) (ProbeVerdict, bool) {
	if !s.cacheOn() || s.opts.ProbeCacheDir == "" {
		return ProbeVerdict{}, false
	}
	loc := s.ident.ServerLocation()
	data, err := os.ReadFile(filepath.Join(s.opts.ProbeCacheDir, loc.cacheName()))
	if err != nil {
		return ProbeVerdict{}, false
	}
	var v ProbeVerdict
	if json.Unmarshal(data, &v) != nil || v.Format != verdictFormat || v.ServerLocation != loc {
		return ProbeVerdict{}, false
	}
	age := s.now().Sub(v.ProbedAt)
	if age < 0 || age >= s.opts.ProbeTTL {
		return ProbeVerdict{}, false
	}
	sw, err := s.serverSoftware(ctx)
	if err != nil || sw == "" || sw != v.Server {
		return ProbeVerdict{}, false
	}
	if !s.stillEnforced(ctx, v.Report.Capabilities) {
		return ProbeVerdict{}, false
	}
	return v, true
}

// stillEnforced checks, on one scratch key, that the server still refuses
// the requests a saved verdict says it refuses: a create with If-None-Match:
// * of a key that exists, a write and (if claimed) a delete with a wrong
// If-Match. Each must fail with 412 or 409. It costs two requests (the
// scratch key's write and delete) plus one per claimed condition; any other
// answer, or a failure, is "not proven". Conditions on copies and multipart
// completions are left to the identity: checking them would cost an upload.
func (s *Store) stillEnforced(ctx context.Context, c Capabilities) bool {
	if !c.PutIfAbsent && !c.PutIfMatch && !c.DeleteIfMatch {
		return true // a verdict that claims nothing makes cairn rely on nothing
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	k := s.opts.ProbePrefix + hex.EncodeToString(rnd[:]) + "/verdict-check"
	body := []byte("cairn verdict check")
	if _, err := s.b.Put(ctx, k, bytes.NewReader(body), int64(len(body)), PutOptions{ContentType: "text/plain"}); err != nil {
		return false
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		_ = s.b.Delete(dctx, k, Condition{})
	}()
	refused := func(err error) bool {
		return errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict)
	}
	put := func(cond Condition) error {
		_, err := s.b.Put(ctx, k, bytes.NewReader(body), int64(len(body)), PutOptions{If: cond, ContentType: "text/plain"})
		return err
	}
	if c.PutIfAbsent && !refused(put(IfAbsent())) {
		return false
	}
	wrong := IfMatch(wrongETag)
	wrong.Unquoted = c.IfMatchUnquoted
	if c.PutIfMatch && !refused(put(wrong)) {
		return false
	}
	if c.DeleteIfMatch && !refused(s.b.Delete(ctx, k, wrong)) {
		return false
	}
	return true
}

// saveVerdict writes rep to the local cache and, if share, publishes it in
// the bucket after filling rep.PreviousShared. Saving is best effort: a
// verdict that cannot be saved is measured again next time.
func (s *Store) saveVerdict(ctx context.Context, rep *ProbeReport, share bool) {
	if !s.cacheOn() {
		return
	}
	sw, err := s.serverSoftware(ctx)
	if err != nil {
		return // who answers is unknown: a verdict saved now could not be checked later
	}
	v := ProbeVerdict{Format: verdictFormat, ServerLocation: s.ident.ServerLocation(), Server: sw, ProbedAt: s.now(), Report: *rep}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return
	}
	// A server that cannot be identified gets no local verdict: none would
	// be reused (freshVerdict).
	if dir := s.opts.ProbeCacheDir; dir != "" && sw != "" {
		_ = writeFileAtomic(dir, v.cacheName(), data)
	}
	if !share {
		return
	}
	rep.PreviousShared = s.compareShared(ctx, *rep)
	_, _ = rootOf(s.b).Put(ctx, s.sharedKey(), bytes.NewReader(data), int64(len(data)), PutOptions{ContentType: "application/json"})
}

// sharedKey is where the bucket's shared verdict lives, at the bucket's root.
func (s *Store) sharedKey() string { return s.opts.ProbePrefix + "verdict.json" }

// compareShared reads the verdict another probe left in the bucket and names
// the checks on which it disagrees with rep; nil if there is none.
func (s *Store) compareShared(ctx context.Context, rep ProbeReport) *SharedVerdict {
	rc, info, err := rootOf(s.b).Get(ctx, s.sharedKey())
	if err != nil {
		return nil
	}
	defer rc.Close()
	var old ProbeVerdict
	if json.NewDecoder(rc).Decode(&old) != nil {
		return &SharedVerdict{Written: info.LastModified, Disagree: []string{"(unreadable)"}}
	}
	sv := &SharedVerdict{ServerLocation: old.ServerLocation, Server: old.Server, Written: info.LastModified}
	for _, c := range rep.Checks {
		i := slices.IndexFunc(old.Report.Checks, func(o ProbeCheck) bool { return o.Name == c.Name })
		if i < 0 || old.Report.Checks[i].Enforced != c.Enforced {
			sv.Disagree = append(sv.Disagree, c.Name)
		}
	}
	return sv
}

// writeFileAtomic writes data to dir/name through a temporary file and a
// rename, so a reader never sees half a verdict; the directory is private
// to the user.
func writeFileAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		os.Remove(f.Name())
		return err
	}
	pruneVerdicts(dir)
	return nil
}

// pruneVerdicts removes saved verdicts nobody has refreshed for 30 days (the
// cache would otherwise grow by one file per bucket ever written to).
func pruneVerdicts(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 30*24*time.Hour {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// probeError is a probe that could not finish. It is never ErrAmbiguous: the
// writes that may or may not have landed were the probe's own scratch writes,
// not the caller's.
type probeError struct {
	store string
	what  string
	cause error
}

func (e *probeError) Error() string {
	what, cause := e.what, e.cause.Error()
	if errors.Is(e.cause, ErrAmbiguous) {
		what += " got no answer"
		cause = strings.ReplaceAll(cause, ErrAmbiguous.Error()+": ", "")
	}
	return fmt.Sprintf("probe of %s failed: %s: %s; nothing is known about its conditions (check that it is reachable and that the credentials may write and delete under the probe prefix, then retry)", e.store, what, cause)
}

// Is makes the error match ErrProbeFailed.
func (e *probeError) Is(target error) bool { return target == ErrProbeFailed }

// Unwrap keeps the cause reachable (ErrBucketNotFound, context.Canceled, …)
// unless it says the outcome of a write is unknown: that was a scratch write.
func (e *probeError) Unwrap() error {
	if errors.Is(e.cause, ErrAmbiguous) {
		return nil
	}
	return e.cause
}

// Detail is the cause's raw chain (see Detail).
func (e *probeError) Detail() string { return Detail(e.cause) }
