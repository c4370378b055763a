package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/ledger"
)

func replayCmd(e *env) *cobra.Command {
	var url, statuses, bucket, prefix, key string
	var since time.Duration
	var dryRun, force bool
	cmd := &cobra.Command{
		Use:   "replay [--status dead|failed|processed] [--bucket B] [--prefix P] [--key K] [--since DUR] [--dry-run]",
		Short: "Make chosen ledger records claimable again, as an explicit replay",
		Long: `cairn replay makes chosen records pending again so that 'cairn serve' runs them:
dead letters by default. A replay is recorded as such (the record's replay count
grows; its delivery count does not), so "run again because we asked" is never
confused with a duplicate delivery. What runs is the record's accepted (newest)
event: a replay never resurrects an older state.

Replaying processed records re-runs finished work; it needs --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sel ledger.Selection
			for _, s := range strings.Split(statuses, ",") {
				st := ledger.Status(strings.TrimSpace(s))
				switch st {
				case ledger.Dead, ledger.Failed:
				case ledger.Processed:
					if !force {
						return usagef("replaying processed records re-runs finished work: add --force")
					}
				default:
					return usagef("--status %q: use dead, failed or processed", st)
				}
				sel.Statuses = append(sel.Statuses, st)
			}
			if key != "" && bucket == "" {
				return usagef("--key needs --bucket")
			}
			sel.Bucket, sel.Prefix, sel.Key, sel.DryRun = bucket, prefix, key, dryRun
			if since > 0 {
				sel.UpdatedSince = time.Now().Add(-since)
			}
			l, err := openExistingLedger(cmd.Context(), url)
			if err != nil {
				return err
			}
			defer l.Close()
			n, err := l.Replay(cmd.Context(), sel)
			if err != nil {
				return err
			}
			if e.json {
				return e.writeJSON(map[string]any{"replayed": n, "dry_run": dryRun})
			}
			if dryRun {
				fmt.Fprintf(e.stdout, "would replay %d records\n", n)
			} else {
				fmt.Fprintf(e.stdout, "replayed %d records\n", n)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	nonEmptyVar(fs, &url, "ledger", ledger.DefaultURL, "ledger URL", "drop --ledger for the default ("+ledger.DefaultURL+")")
	nonEmptyVar(fs, &statuses, "status", "dead", "statuses to replay, comma-separated: dead, failed, processed", "name the statuses, or drop --status for dead")
	nonEmptyVar(fs, &bucket, "bucket", "", "only this bucket", "an empty filter would replay every bucket; drop --bucket to mean that")
	nonEmptyVar(fs, &prefix, "prefix", "", "only keys under this prefix", "an empty filter would replay every key; drop --prefix to mean that")
	nonEmptyVar(fs, &key, "key", "", "only this key (with --bucket)", "an empty filter would replay every key; drop --key to mean that")
	durflag.Var(fs, &since, "since", 0, "only records updated within this long")
	fs.BoolVar(&dryRun, "dry-run", false, "count only")
	fs.BoolVar(&force, "force", false, "allow replaying processed records")
	return cmd
}

func purgeCmd(e *env, url *string) *cobra.Command {
	var olderThan time.Duration
	var includeDead bool
	cmd := &cobra.Command{
		Use:   "purge [--older-than 30d] [--include-dead]",
		Short: "Delete finished records older than the retention period (never pending or claimed work)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return usagef("--older-than %s: give a positive retention such as 30d (0 would purge records finished a moment ago)", olderThan)
			}
			if olderThan < ledger.MinPurgeAge {
				return usagef("--older-than %s: give a retention of at least %s such as 30d (a purged key's next fencing tokens come from the claiming machine's clock, above the purged record's only for records older than clocks can disagree)", olderThan, ledger.MinPurgeAge)
			}
			l, err := openExistingLedger(cmd.Context(), *url)
			if err != nil {
				return err
			}
			defer l.Close()
			n, err := l.Purge(cmd.Context(), time.Now().Add(-olderThan), includeDead)
			if err != nil {
				return err
			}
			if e.json {
				return e.writeJSON(map[string]any{"purged": n})
			}
			fmt.Fprintf(e.stdout, "purged %d records last updated more than %s ago\n", n, olderThan)
			return nil
		},
	}
	durflag.Var(cmd.Flags(), &olderThan, "older-than", 30*24*time.Hour, "retention: purge records last updated before this long ago")
	cmd.Flags().BoolVar(&includeDead, "include-dead", false, "purge failed and dead records too")
	return cmd
}
