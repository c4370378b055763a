package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

// exitError carries a status a command has spoken for itself: a child's exit
// code, or a failure it has already reported in full (Main then prints
// nothing). Errors of a kind (usage, precondition, lease lost) are mapped by
// exitCode instead.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func lockCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lock",
		Short: "Hold leases (with fencing tokens) stored in the bucket while commands run",
		Long: `Leases are objects in the store: one holder at a time, renewed in the
background, taken over after one TTL of silence, and each acquisition gets a
fencing token one higher than the last. Expiry never compares two machines'
clocks. These are cooperative locks: pass the token on to whatever the command
writes and have it refuse tokens lower than the highest it has seen.`,
	}
	cmd.AddCommand(lockRunCmd(e), lockStatusCmd(e), lockForceUnlockCmd(e), lockTreeCmd(e), lockKeepCmd())
	return cmd
}

func lockRunCmd(e *env) *cobra.Command {
	var ttl, wait time.Duration
	var obj objectFlags
	cmd := &cobra.Command{
		Use:   "run (URL | --store URL --key KEY) [--ttl 30s] [--wait 0|DUR] -- CMD ARGS…",
		Short: "Run a command while holding a lease; CAIRN_FENCING_TOKEN is in its environment",
		Long: `run takes the lease named by URL (e.g. s3://bucket/locks/deploy or
file:///srv/data/locks/deploy), runs CMD with CAIRN_FENCING_TOKEN and
CAIRN_LEASE set, renews the lease while CMD runs, and releases it after.
--store URL --key KEY names the lease's object apart from a URL (the key taken
byte for byte).

Exit codes: CMD's own exit code; 3 if the lease could not be acquired within
--wait (0: try once); 4 if the lease was lost while CMD ran.

CMD runs only while the lease is provably held: its whole process group is
killed (SIGKILL) the moment no renewal was confirmed within the TTL (less a
twentieth) since the last one was sent, as measured here, whether the store
refused, failed or never answered. On Linux a keeper process holds that
deadline too, so the group dies on time even if cairn is stopped (SIGSTOP, a
pause), and when cairn dies.`,
		Example: `  cairn lock run s3://ops/locks/deploy --ttl 30s --wait 5m -- ./deploy.sh
  cairn lock run file:///srv/data/locks/compact -- sh -c 'compact --fencing-token "$CAIRN_FENCING_TOKEN"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			urls := 1
			if obj.given() {
				urls = 0
			}
			if len(args) < urls+1 || cmd.ArgsLenAtDash() != urls {
				return errors.New("give the lease's URL (or --store URL --key KEY), then the command after --: cairn lock run URL -- CMD ARGS…")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < time.Second {
				return usagef("--ttl must be at least 1s")
			}
			ctx := cmd.Context()
			urls, argv := args[:cmd.ArgsLenAtDash()], args[cmd.ArgsLenAtDash():]
			name := obj.name(urls)
			s, key, err := obj.open(ctx, urls)
			if err != nil {
				return err
			}
			defer s.Close()
			m := lease.New(s, &lease.Options{TTL: ttl})
			l, err := acquireWithin(ctx, wait, key, m.TryAcquire, m.Acquire)
			if errors.Is(err, lease.ErrNotAcquired) {
				// Name the holder, so that the person at the terminal can tell
				// a live job from a dead one.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				st, _, serr := m.Status(rctx, key)
				cancel()
				if serr != nil || st.Holder == "" {
					return fmt.Errorf("lease %s is held by another holder (see 'cairn lock status'): %w", name, err)
				}
				return fmt.Errorf("lease %s is held by %s (pid %d on %s) since %s, fencing token %d: wait for it (--wait DUR), or if that holder is dead, cairn lock force-unlock %s --holder %s: %w",
					name, safetext.Escape(st.Holder), st.PID, safetext.Escape(st.Host), cmp.Or(st.Acquired, "-"), st.Token, name, safetext.Escape(st.Holder), err)
			}
			if err != nil {
				return err
			}
			e.log.Info("lease acquired", "lease", name, "token", l.Token())
			code, lost := runHeld(e, argv, []string{"CAIRN_FENCING_TOKEN=" + strconv.FormatInt(l.Token(), 10), "CAIRN_LEASE=" + name},
				l.Done(), l.Err, l.Deadline, ttl)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if rerr := l.Release(rctx); rerr != nil && !lost {
				e.log.Warn("releasing the lease failed; it expires by itself after the TTL", "err", rerr)
			}
			if lost {
				return fmt.Errorf("lease %s was lost while the command ran (%v); its process group was killed: %w", name, l.Err(), lease.ErrLeaseLost)
			}
			if code != 0 {
				return exitError{code, fmt.Errorf("command exited with status %d", code)}
			}
			return nil
		},
	}
	durflag.Var(cmd.Flags(), &ttl, "ttl", 30*time.Second, "lease time-to-live (renewed every ttl/3)")
	durflag.Var(cmd.Flags(), &wait, "wait", 0, "how long to wait for the lease (0: try once)")
	obj.register(cmd)
	return cmd
}

// lockKeepCmd is the deadline keeper lock run and lock tree start (see
// keeper_linux.go); not for people.
func lockKeepCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "keep DEADLINE",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			first, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return usagef("lock keep: %v", err)
			}
			return keep(first, os.Stdin)
		},
	}
}

// acquireWithin tries once (wait <= 0) or waits up to wait.
func acquireWithin[R, H any](ctx context.Context, wait time.Duration, r R, try, block func(context.Context, R) (H, error)) (H, error) {
	if wait <= 0 {
		return try(ctx, r)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return block(wctx, r)
}

// runHeld runs argv with extra environment, forwarding SIGINT/SIGTERM, while
// a lock is held, and kills its whole process group the moment the lock can
// no longer be proven held: ttl/20 before deadline() (the holder's deadline:
// TTL after the start of the last renewal confirmed, on this process's
// clock), or when done closes (the lock was lost), whether or not any
// renewal has answered. A deadline keeper (see keeper_linux.go) leads the
// command's process group and kills it at the same deadline if this process
// is stopped, and when it dies. It returns the command's exit code and
// whether the lock was lost.
func runHeld(e *env, argv, extraEnv []string, done <-chan struct{}, why func() error, deadline func() time.Time, ttl time.Duration) (int, bool) {
	stopAt := func() time.Time { return deadline().Add(-ttl / 20) }
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = append(os.Environ(), extraEnv...)
	c.Stdin, c.Stdout, c.Stderr = e.stdin, e.stdout, e.stderr
	k, err := startKeeper(stopAt())
	if err != nil {
		fmt.Fprintln(e.stderr, "cairn:", safetext.Escape(err.Error()))
		return 1, false
	}
	keeperGroup := 0
	if k != nil {
		keeperGroup = k.pgid()
	}
	c.SysProcAttr = groupAttr(keeperGroup)
	withParentDeath(c.SysProcAttr)
	expired := errors.New("no renewal confirmed before the deadline (the store unreachable or slow, or this process stalled)")
	if !time.Now().Before(stopAt()) {
		err = expired // never start a command the lock no longer covers
	} else {
		err = c.Start()
	}
	if err != nil {
		lost := !time.Now().Before(stopAt()) // the keeper may have killed its group (and exited) first
		if k != nil {
			k.end()
		}
		if lost {
			e.log.Error("lock lost before the command started", "err", expired)
			return 1, true
		}
		fmt.Fprintln(e.stderr, "cairn:", safetext.Escape(err.Error()))
		return 127, false
	}
	pgid := c.Process.Pid
	if keeperGroup != 0 {
		pgid = keeperGroup
	}
	// Once the command has exited, whatever it left in its group
	// (background jobs, grandchildren) dies before the lock is released.
	defer func() {
		signalGroup(pgid, syscall.SIGKILL)
		if k != nil {
			k.end()
		}
	}()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	lost := false
	stop := func(err error) {
		if !lost {
			lost = true
			e.log.Error("lock lost; killing the command's process group", "err", err)
			signalGroup(pgid, syscall.SIGKILL)
		}
	}
	// The check wakes at the deadline, and, with a keeper, often enough to
	// pass it each later deadline soon after the renewal that proved it.
	next := func() time.Duration {
		d := time.Until(stopAt())
		if k != nil {
			d = min(d, max(ttl/20, 10*time.Millisecond))
		}
		return max(d, 0)
	}
	check := time.NewTimer(next())
	defer check.Stop()
	for {
		select {
		case err := <-exited:
			if !lost && !time.Now().Before(stopAt()) {
				lost = true // killed by the keeper, or about to be
			}
			var ee *exec.ExitError
			switch {
			case err == nil:
				return 0, lost
			case errors.As(err, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal()), lost
				}
				return ee.ExitCode(), lost
			default:
				return 1, lost
			}
		case s := <-sigs:
			signalGroup(pgid, s.(syscall.Signal))
		case <-done:
			done = nil
			stop(why())
		case <-check.C:
			if lost {
				continue
			}
			at := stopAt()
			if !time.Now().Before(at) {
				stop(expired)
				continue
			}
			if k != nil {
				k.extend(at)
			}
			check.Reset(next())
		}
	}
}

func lockStatusCmd(e *env) *cobra.Command {
	var obj objectFlags
	var tree bool
	cmd := &cobra.Command{
		Use:   "status (URL | --store URL --key KEY | --store URL --tree)",
		Short: "Show a lease's holder, fencing token and renewals, or the tree locks' sessions",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tree {
				return treeStatus(cmd.Context(), e, obj, args)
			}
			name := obj.name(args)
			s, key, err := obj.open(cmd.Context(), args)
			if err != nil {
				return err
			}
			defer s.Close()
			st, meta, err := lease.New(s, nil).Status(cmd.Context(), key)
			if errors.Is(err, objstore.ErrNotFound) {
				st, err = lease.State{}, nil
			}
			if err != nil {
				return err
			}
			held := st.Holder != ""
			if e.json {
				return e.writeJSON(map[string]any{"lease": name, "held": held, "state": st, "revision": meta.Rev,
					"last_write": meta.LastModified})
			}
			if !held {
				fmt.Fprintf(e.stdout, "%s: free (last fencing token %d)\n", obj.display(args), st.Token)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s: held by %s (pid %d on %s)\nfencing token: %d\nttl: %s, renewals: %d, revision %d\nacquired: %s (holder's clock)\nlast write: %s (store's clock); expires if not renewed within the ttl\n",
				obj.display(args), safetext.Escape(st.Holder), st.PID, safetext.Escape(st.Host), st.Token, time.Duration(st.TTLms)*time.Millisecond, st.Renewals, meta.Rev,
				st.Acquired, meta.LastModified.Format(time.RFC3339Nano))
			return nil
		},
	}
	obj.register(cmd)
	cmd.Flags().BoolVar(&tree, "tree", false, "list the sessions of cairn lock tree in --store (each a process holding or waiting for tree locks): id, holder, since, last write")
	return cmd
}

// treeStore opens --store for the tree-lock commands, which name no key.
func treeStore(ctx context.Context, obj objectFlags, args []string) (*objstore.Store, error) {
	if len(args) > 0 || obj.key != "" || obj.store == "" {
		return nil, usagef("tree locks live in a store: give --store URL alone (no key, no URL argument)")
	}
	return objstore.Open(ctx, obj.store, nil)
}

func treeStatus(ctx context.Context, e *env, obj objectFlags, args []string) error {
	s, err := treeStore(ctx, obj, args)
	if err != nil {
		return err
	}
	defer s.Close()
	m := treelock.New(s, nil)
	defer m.Close()
	sessions, err := m.Sessions(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(map[string]any{"sessions": sessions})
	}
	if len(sessions) == 0 {
		fmt.Fprintf(e.stdout, "%s: no tree-lock sessions\n", safetext.URL(obj.store))
		return nil
	}
	tab := &textTable{}
	tab.add("SESSION", "HOLDER (HOST/PID)", "SINCE", "TTL", "RENEWALS", "LAST WRITE (STORE'S CLOCK)")
	for _, si := range sessions {
		tab.add(safetext.Escape(si.ID), safetext.Escape(si.Holder), cmp.Or(safetext.Escape(si.Since), "-"), si.TTL.String(), fmt.Sprint(si.Renewals),
			si.LastWrite.Format(time.RFC3339))
	}
	if err := tab.write(e.stdout); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "a live session rewrites its document every third of its TTL; one that stopped is judged dead after one TTL, or release it now: cairn lock force-unlock --store URL --tree-session SESSION")
	return nil
}

func lockForceUnlockCmd(e *env) *cobra.Command {
	var obj objectFlags
	var holder, treeSession string
	var marks []string
	cmd := &cobra.Command{
		Use:   "force-unlock (URL | --store URL --key KEY) [--holder NAME] [--fence-object KEY]… | --store URL --tree-session ID",
		Short: "Release a lease (or a tree-lock session) held by a dead holder, bumping its fencing token",
		Long: `force-unlock releases a lease now, on purpose, instead of waiting out its TTL:
for a holder you know is dead (a killed job, a lost machine). It says whom it
released (holder, host, pid, since when, fencing token). Give --holder (as
cairn lock status names it) so that a lease taken over meanwhile by a live
holder is left alone (exit 3).

The lease's fencing token is bumped: the next holder's token is two higher
than the released one's, and the released holder, if alive after all, loses
the lease at its next renewal. Its writes still carry its old token: a sink
refuses them once it has seen a higher one. --fence-object KEY (repeatable,
keys in the lease's store) rewrites those objects, unchanged, with the bumped
token (fenced), so that from now on they refuse the old holder's fenced
writes.

--store URL --tree-session ID ends a cairn lock tree session instead (cairn
lock status --store URL --tree lists them: holder host/pid, since when, last
write): every tree lock it holds is free at once, the next grant of each path
takes a fencing token above the session's, and the session's process, if
alive after all, loses its locks at its next renewal (exit 4).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if treeSession != "" {
				return treeForceUnlock(cmd.Context(), e, obj, args, treeSession)
			}
			name := obj.display(args)
			s, key, err := obj.open(cmd.Context(), args)
			if err != nil {
				return err
			}
			defer s.Close()
			for _, k := range marks {
				if err := objstore.ValidateKey(k); err != nil {
					return usagef("--fence-object %s: %v", safetext.Escape(k), err)
				}
			}
			released, err := lease.New(s, nil).ForceRelease(cmd.Context(), key, holder)
			if errors.Is(err, lease.ErrNotHeld) {
				st, _, _ := lease.New(s, nil).Status(cmd.Context(), key)
				now := "free"
				if st.Holder != "" {
					now = "held by " + safetext.Escape(st.Holder) + " (pid " + fmt.Sprint(st.PID) + " on " + safetext.Escape(st.Host) + ")"
				}
				return fmt.Errorf("%s: nothing released: it is %s, not held by %s; see cairn lock status %s: %w", name, now,
					cmp.Or(safetext.Escape(holder), "anyone"), name, lease.ErrNotHeld)
			}
			if err != nil {
				return err
			}
			next := released.Token + 1
			var marked []string
			for _, k := range marks {
				body, _, err := fence.Get(cmd.Context(), s, k)
				if err == nil {
					_, err = fence.PutBytes(cmd.Context(), s, k, body, next, nil)
				}
				if err != nil {
					return fmt.Errorf("%s released (holder %s, token %d), but raising the fence mark of %s to %d failed: %w; run cairn put with --fence-token %d to that object to raise it",
						name, safetext.Escape(released.Holder), released.Token, safetext.Escape(k), next, err, next)
				}
				marked = append(marked, k)
			}
			if e.json {
				return e.writeJSON(map[string]any{"lease": obj.name(args), "released": released, "token": next, "fence_marked": marked})
			}
			fmt.Fprintf(e.stdout, "%s: released; it was held by %s (pid %d on %s) since %s with fencing token %d\nthe lease is free; its token is now %d, the next holder's will be %d\n",
				name, safetext.Escape(released.Holder), released.PID, safetext.Escape(released.Host), cmp.Or(released.Acquired, "-"), released.Token, next, next+1)
			for _, k := range marked {
				fmt.Fprintf(e.stdout, "%s: fence mark raised to %d: writes with token %d are refused\n", safetext.Escape(k), next, released.Token)
			}
			return nil
		},
	}
	obj.register(cmd)
	nonEmptyVar(cmd.Flags(), &holder, "holder", "", "release only if this holder (as lock status names it) holds the lease", "drop --holder to release whoever holds it")
	cmd.Flags().StringArrayVar(&marks, "fence-object", nil, "an object in the lease's store to rewrite with the bumped fencing token (repeatable)")
	nonEmptyVar(cmd.Flags(), &treeSession, "tree-session", "", "with --store alone: end this cairn lock tree session (cairn lock status --store URL --tree lists them), freeing every tree lock it holds", "name the session (cairn lock status --store URL --tree)")
	return cmd
}

func treeForceUnlock(ctx context.Context, e *env, obj objectFlags, args []string, id string) error {
	s, err := treeStore(ctx, obj, args)
	if err != nil {
		return err
	}
	defer s.Close()
	m := treelock.New(s, nil)
	defer m.Close()
	si, err := m.ForceRelease(ctx, id)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(map[string]any{"released": si})
	}
	fmt.Fprintf(e.stdout, "tree-lock session %s released: it was %s, since %s, last written %s; every lock it held or waited for is free, and the next grant of each path takes a higher fencing token\n",
		safetext.Escape(si.ID), safetext.Escape(si.Holder), cmp.Or(safetext.Escape(si.Since), "-"), si.LastWrite.Format(time.RFC3339))
	return nil
}

func lockTreeCmd(e *env) *cobra.Command {
	var storeURL string
	var reads, writes []string
	var ttl, wait time.Duration
	cmd := &cobra.Command{
		Use:   "tree --store URL [--read PATH]… [--write PATH]… [--ttl 30s] [--wait DUR] -- CMD ARGS…",
		Short: "Run a command holding a distributed hierarchical lock on pseudo-folder paths",
		Long: `tree locks paths like /datasets/orders across processes and machines: a write
of a path excludes every read and write of its ancestors and descendants; reads
share. Lock documents live under cairn-locks/tree/ in the store and are deleted
again once no one uses them; a crashed holder's locks are released after --ttl.

CMD gets a fencing token for each path it names: every grant of a path takes a
token larger than every earlier one of that path. Pass it on to whatever CMD
writes, and have it refuse tokens lower than the highest it has seen for that
path (tokens of different paths are not comparable).
  CAIRN_FENCING_TOKEN   the token of the first --write path (of the first
                        --read path if there is no --write)
  CAIRN_FENCING_TOKENS  every path named, as given, with its token:
                        PATH=TOKEN,PATH=TOKEN,… (--read paths first, then --write)
  CAIRN_TREE_LOCK       the request: r:PATH,…,w:PATH,…

Exit codes: CMD's own; 3 if not acquired within --wait (0: try once); 4 if the
lock's session was lost while CMD ran. CMD's process group is killed the
moment the session can no longer be proven alive, as with lock run.`,
		Example: `  cairn lock tree --store s3://lake --write /datasets/orders --read /reference -- ./rebuild.sh
  cairn lock tree --store s3://lake --write /datasets/orders -- sh -c 'rebuild --fencing-token "$CAIRN_FENCING_TOKEN"'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return usagef("put the command after --: cairn lock tree --store URL --write /p -- CMD ARGS…")
			}
			if len(reads)+len(writes) == 0 {
				return usagef("name at least one --read or --write path")
			}
			if ttl < time.Second {
				return usagef("--ttl must be at least 1s")
			}
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			m := treelock.New(s, &treelock.Options{TTL: ttl})
			defer m.Close()
			req := treelock.Request{Read: reads, Write: writes}
			h, err := acquireWithin(ctx, wait, req, m.TryAcquire, m.Acquire)
			switch {
			case err != nil:
				return err // pathlock.ErrBadPath exits 2, treelock.ErrNotAcquired 3
			}
			env := append(treeTokens(h, reads, writes), "CAIRN_TREE_LOCK="+strings.Join(append(prefixed("r:", reads), prefixed("w:", writes)...), ","))
			e.log.Info("tree lock acquired", "tokens", env[1])
			code, lost := runHeld(e, args, env, h.Done(), h.Err, h.Deadline, ttl)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if rerr := h.Release(rctx); rerr != nil && !lost {
				e.log.Warn("releasing the tree lock failed; others take it once the session ends", "err", rerr)
			}
			cancel()
			if lost {
				return treelock.ErrSessionLost
			}
			if code != 0 {
				return exitError{code, fmt.Errorf("command exited with status %d", code)}
			}
			return nil
		},
	}
	nonEmptyVar(cmd.Flags(), &storeURL, "store", "", "store URL holding the lock documents", "name the store holding the locks")
	nonEmptyArrayVar(cmd.Flags(), &reads, "read", "path to lock for reading (repeatable)", "name a path, e.g. /datasets/orders")
	nonEmptyArrayVar(cmd.Flags(), &writes, "write", "path to lock for writing (repeatable)", "name a path, e.g. /datasets/orders")
	durflag.Var(cmd.Flags(), &ttl, "ttl", 30*time.Second, "session time-to-live")
	durflag.Var(cmd.Flags(), &wait, "wait", 0, "how long to wait (0: try once)")
	_ = cmd.MarkFlagRequired("store")
	return cmd
}

func prefixed(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + x
	}
	return out
}

// treeTokens is CAIRN_FENCING_TOKEN (the first write path's token, else the
// first read path's) and CAIRN_FENCING_TOKENS (every path as given, once,
// reads first: PATH=TOKEN,…).
func treeTokens(h *treelock.Held, reads, writes []string) []string {
	first := append(slices.Clone(writes), reads...)[0]
	var all []string
	seen := map[string]bool{}
	for _, p := range append(slices.Clone(reads), writes...) {
		if !seen[p] {
			seen[p] = true
			all = append(all, p+"="+strconv.FormatInt(h.Token(p), 10))
		}
	}
	return []string{"CAIRN_FENCING_TOKEN=" + strconv.FormatInt(h.Token(first), 10), "CAIRN_FENCING_TOKENS=" + strings.Join(all, ",")}
}
