package cli

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/internal/bench"
	"github.com/cairn-s3/cairn/objstore"
)

func benchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench NAME",
		Short: "Measure cairn against a naive baseline in the same run and print the ratio",
		Long: `bench runs a whole-system benchmark. Each measures a naive baseline and cairn
in the same run, interleaved, and prints both figures and their ratio (with
--json, one JSON object per line; the last line has name, unit, baseline, cairn
and ratio). Absolute figures on shared machines are noise; ratios are not.`,
	}
	cmd.AddCommand(benchObjstoreCmd(e), benchDocsCmd(e), benchDocsWorkerCmd(e), benchLedgerCmd(e), benchServeCmd(e), benchFsCmd(e), benchAuditCmd(e))
	return cmd
}

func benchObjstoreCmd(e *env) *cobra.Command {
	var storeURL string
	var ops, size int
	cmd := &cobra.Command{
		Use:   "objstore",
		Short: "Cost of conditional writes (if-absent, if-match) against plain writes on one store",
		Long: `Measures, alternating in rounds on the same store, plain PUTs (the baseline)
against write-once PUTs (If-None-Match: *) of fresh keys and compare-and-swap
PUTs (If-Match) of one key. A ratio near 1 means conditions are nearly free;
the fs store's target is >= 0.5 (conditional within 2x of plain).`,
		Example: `  cairn bench objstore --store ./cairn-data/bench
  cairn bench objstore --store 's3://bucket/bench?endpoint=http://127.0.0.1:9000&path_style=true' --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ops < 10 {
				return usagef("--ops must be at least 10")
			}
			s, err := openStore(cmd.Context(), storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			results, err := benchObjstore(cmd.Context(), s, ops, size)
			if err != nil {
				return err
			}
			return bench.Print(e.stdout, e.json, results)
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "./cairn-data/bench", "store URL to benchmark (scratch keys go under cairn-bench/)")
	cmd.Flags().IntVar(&ops, "ops", 400, "operations per variant")
	cmd.Flags().IntVar(&size, "size", 4096, "object size in bytes")
	return cmd
}

func benchObjstore(ctx context.Context, s *objstore.Store, ops, size int) ([]bench.Result, error) {
	caps, err := s.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	if !caps.ConditionalWrites() {
		return nil, fmt.Errorf("%s does not enforce conditional writes (see `cairn probe`); nothing to compare", s)
	}
	body := bytes.Repeat([]byte("c"), size)
	prefix := fmt.Sprintf("cairn-bench/%d/", time.Now().UnixNano())
	defer func() {
		for info, err := range s.List(context.WithoutCancel(ctx), prefix, nil) {
			if err != nil {
				return
			}
			_ = s.Delete(context.WithoutCancel(ctx), info.Key, objstore.Condition{})
		}
	}()
	cas, err := s.PutBytes(ctx, prefix+"cas", body, nil)
	if err != nil {
		return nil, err
	}
	etag := cas.ETag
	var plain, absent, match bench.Latencies
	const rounds = 10
	per := max(1, ops/rounds)
	timed := func(l *bench.Latencies, f func() error) error {
		t0 := time.Now()
		if err := f(); err != nil {
			return err
		}
		*l = append(*l, time.Since(t0))
		return nil
	}
	for r := range rounds {
		for i := range per {
			k := fmt.Sprintf("%sobj/%d-%d", prefix, r, i)
			if err := timed(&plain, func() error { _, err := s.PutBytes(ctx, k+"-plain", body, nil); return err }); err != nil {
				return nil, err
			}
			if err := timed(&absent, func() error {
				_, err := s.PutBytes(ctx, k+"-once", body, &objstore.PutOptions{If: objstore.IfAbsent()})
				return err
			}); err != nil {
				return nil, err
			}
			body[0] = byte('a' + i%26) // change content so the ETag changes
			if err := timed(&match, func() error {
				info, err := s.PutBytes(ctx, prefix+"cas", body, &objstore.PutOptions{If: objstore.IfMatch(etag)})
				etag = info.ETag
				return err
			}); err != nil {
				return nil, err
			}
		}
	}
	mk := func(name string, l bench.Latencies, desc string) bench.Result {
		r := bench.NewResult(name, "puts/s", plain.PerSecond(), l.PerSecond())
		r.BaselineDesc, r.CairnDesc = "plain PUT", desc
		r.BaselineP99, r.CairnP99 = plain.Percentile(99), l.Percentile(99)
		r.Note = fmt.Sprintf("%s, %d ops each, %d-byte objects, sequential", s, len(l), size)
		return r
	}
	return []bench.Result{
		mk("objstore/put-if-absent", absent, "PUT If-None-Match: *"),
		mk("objstore/put-if-match", match, "PUT If-Match (CAS)"),
	}, nil
}
