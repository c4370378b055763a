package cli

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/objstore"
)

func probeCmd(e *env) *cobra.Command {
	var racers, rounds int
	var require []string
	var noCache bool
	names := objstore.ProbeCheckNames()
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Prove by experiment which write conditions a store really enforces",
		Long: `probe writes scratch objects under cairn-probe/ in the store and checks, by
experiment, whether it enforces put-if-absent (If-None-Match: *), put-if-match,
delete-if-match, copy destination conditions and conditional multipart
completion, and whether N racing creates of one key have exactly one winner.
Many "S3-compatible" servers accept these headers and ignore them; MinIO ignores
them on DELETE and on the CopyObject destination. The scratch objects are
deleted afterwards.

Other commands probe only when a write needs a condition and no fresh verdict
is saved: reads never probe (read-only credentials are enough), and a write
reuses the verdict saved in the local cache (<user cache dir>/cairn/probe/,
for 24 hours, as long as the server still identifies itself the same way and
still refuses, on a scratch key, the conditional writes the verdict says it
refuses; a server that identifies itself in no way is probed every time).
A condition is enforced only if a request that violates it is refused and one
that meets it succeeds.
probe always probes and saves its verdict there and in the bucket at
cairn-probe/verdict.json, after comparing it with the verdict found there
(which cairn never trusts in place of a probe: anyone who may run the probe
may also write it). --no-cache saves nothing.

Checks: ` + strings.Join(names, ", ") + `.
With --require, probe exits with code 3 unless every named check is enforced.`,
		Example: `  cairn probe ./cairn-data/store
  cairn probe 's3://my-bucket/scratch?endpoint=http://127.0.0.1:9000&path_style=true' --json
  cairn probe s3://my-bucket --require put-if-absent,put-if-match`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range require {
				if !slices.Contains(names, name) {
					return usagef("--require %q: not a probe check (the checks: %s)", name, strings.Join(names, ", "))
				}
			}
			if racers < 2 || rounds < 1 {
				return usagef("--racers %d --rounds %d: at least 2 writers must race, in at least 1 round", racers, rounds)
			}
			s, err := openStore(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			e.log.Debug("probing", "store", s.String())
			rep, err := objstore.Probe(cmd.Context(), s, &objstore.ProbeOptions{Racers: racers, Rounds: rounds, Share: !noCache, NoCache: noCache})
			if err != nil {
				return err
			}
			if e.json {
				if err := e.writeJSON(rep); err != nil {
					return err
				}
			} else {
				printProbe(e, rep)
			}
			var missing []string
			for _, name := range require {
				i := slices.IndexFunc(rep.Checks, func(c objstore.ProbeCheck) bool { return c.Name == name })
				if i < 0 || !rep.Checks[i].Enforced {
					missing = append(missing, name)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("%w: %s does not enforce %s", objstore.ErrPreconditionFailed, rep.Store, strings.Join(missing, ", "))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&racers, "racers", 16, "concurrent conditional writes of one key per round of the racing-creates and racing-updates checks")
	cmd.Flags().IntVar(&rounds, "rounds", 3, "rounds of each racing check; every round must have exactly one winner")
	nonEmptyListVar(cmd.Flags(), &require, "require", "exit 3 unless these checks are enforced (comma-separated: "+strings.Join(names, ", ")+")", "an empty list would require nothing; drop --require to mean that")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "do not save the verdict (neither in the local cache nor in the bucket)")
	return cmd
}

func printProbe(e *env, rep objstore.ProbeReport) {
	fmt.Fprintf(e.stdout, "store: %s\n\n", rep.Store)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tENFORCED\tTIME\tOBSERVED")
	for _, c := range rep.Checks {
		yes := "no"
		if c.Enforced {
			yes = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, yes, c.Elapsed.Round(100*time.Microsecond), c.Outcome)
	}
	tw.Flush()
	c := rep.Capabilities
	fmt.Fprintln(e.stdout)
	if c.ConditionalWrites() {
		fmt.Fprintln(e.stdout, "compare-and-swap documents, write-once objects and leases: supported")
	} else {
		fmt.Fprintln(e.stdout, "compare-and-swap: NOT supported here; cairn refuses conditional writes on this store and documents fall back to last-writer-wins only if you opt in")
	}
	if !c.DeleteIfMatch {
		fmt.Fprintln(e.stdout, "conditional delete: not enforced; cairn releases leases and tombstones objects with conditional PUTs instead")
	}
	if !c.CopyIfAbsent || !c.CopyIfMatch {
		fmt.Fprintln(e.stdout, "conditional copy: not enforced; cairn never relies on a conditional CopyObject destination here")
	}
	for _, f := range rep.Findings {
		fmt.Fprintln(e.stdout, "finding: "+safetext.Escape(f))
	}
	if sv := rep.PreviousShared; sv != nil {
		when := sv.Written.UTC().Format(time.RFC3339)
		if len(sv.Disagree) == 0 {
			fmt.Fprintf(e.stdout, "the verdict shared in the bucket (written %s) agrees; replaced by this one\n", when)
		} else {
			fmt.Fprintf(e.stdout, "WARNING: the verdict shared in the bucket (written %s through %s, server %q) disagreed on %s: the server changed, or that verdict was false; replaced by this one\n",
				when, safetext.Escape(sv.Endpoint), safetext.Escape(sv.Server), strings.Join(sv.Disagree, ", "))
		}
	}
	fmt.Fprintf(e.stdout, "probe took %s\n", rep.Elapsed.Round(time.Millisecond))
}
