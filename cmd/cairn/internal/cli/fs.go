package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/progress"
	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

type fsFlags struct {
	store       string
	concurrency int
	localLock   bool
	lockTTL     time.Duration
	overwrite   bool
}

func fsCmd(e *env) *cobra.Command {
	var f fsFlags
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Folder operations on key prefixes: rename, copy, delete, snapshot — locked and crash-safe",
		Long: `Folder operations on key prefixes ("folders"), locked against other cairn users
and crash-safe: before changing anything, an intent journal (the operation and a
manifest of every source key and ETag) is written under cairn-journal/; if the
process dies, the next cairn operation on an overlapping folder, or
'cairn fs recover', finishes it. Objects that changed after the manifest was
taken are reported and left alone.

Folders are given as URLs (s3://bucket/path/?endpoint=…, file:///dir/path/, a
path) or, with --store URL, as paths inside that store. SRC and DST must be in
the same store. Locks are the distributed tree lock (cairn-locks/tree/) unless
--local-lock says only this process touches the bucket.

Interrupted (Ctrl-C, SIGTERM) or stopped by an error (a full disk), a command
says what it left: nothing changed, or how many objects were copied or deleted
("at least N", and how many more were under way and may have landed, when
requests were in flight), and that the operation is journaled and will be
finished by 'cairn fs recover --store URL' or by the next operation on these
folders. Running the same mv or rm again after such a roll-forward reports it
done ("already renamed") when the roll-forward's record in the journal and the
folders show it was. 'fs ls' warns (stderr; "unfinished" in JSON) when a folder
has an operation that is running or was interrupted. A finished roll-forward
leaves its journal as a tombstone under cairn-journal/ (so that the same
command run again reports it done); 'cairn fs recover' removes tombstones older
than an hour. A command that waits for another's lock says so on stderr, naming
the holder (host/pid) where the lock records it.

Exit codes: 0 done, 1 error, 2 usage, 3 destination not empty or objects
changed meanwhile (named on stderr), 130 interrupted by Ctrl-C (SIGINT), 143 by
SIGTERM.`,
	}
	pf := cmd.PersistentFlags()
	nonEmptyVar(pf, &f.store, "store", "", "store URL; folders are then paths inside it, taken byte for byte (never parsed as URLs)", "name the store, or drop --store and give folders as URLs")
	pf.IntVar(&f.concurrency, "concurrency", 16, "copies or deletes in flight")
	pf.BoolVar(&f.localLock, "local-lock", false, "lock in this process only (nothing else touches the bucket)")
	durflag.Var(pf, &f.lockTTL, "lock-ttl", 30*time.Second, "TTL of the distributed lock session (a killed holder's locks go after it)")

	two := func(use, short string, run func(*folder.Ops, context.Context, string, string) (folder.Result, error)) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(2), RunE: func(cmd *cobra.Command, args []string) error {
			return e.runFolder(cmd.Context(), f, args, func(ops *folder.Ops, folders []string) (any, error) {
				return run(ops, cmd.Context(), folders[0], folders[1])
			})
		}}
		c.Flags().BoolVar(&f.overwrite, "overwrite", false, "write into a destination that already holds objects")
		return c
	}
	mv := two("mv SRC DST", "Rename a folder: every object under SRC moves to DST", func(ops *folder.Ops, ctx context.Context, a, b string) (folder.Result, error) {
		return ops.Rename(ctx, a, b, f.overwrite)
	})
	cp := two("cp SRC DST", "Copy a folder", func(ops *folder.Ops, ctx context.Context, a, b string) (folder.Result, error) {
		return ops.Copy(ctx, a, b, f.overwrite)
	})
	rm := &cobra.Command{Use: "rm FOLDER", Short: "Delete every object under a folder", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.runFolder(cmd.Context(), f, args, func(ops *folder.Ops, folders []string) (any, error) {
				return ops.Delete(cmd.Context(), folders[0])
			})
		}}
	var out string
	snap := &cobra.Command{Use: "snapshot FOLDER [-o FILE]", Short: "Write a consistent tar archive of a folder (stdout by default)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := e.stdout
			if out != "" && out != "-" {
				fh, err := os.Create(out)
				if err != nil {
					return err
				}
				defer fh.Close()
				w = fh
			} else if isTerminal(e.stdout) {
				return usagef("refusing to write a tar archive to a terminal: redirect stdout or use -o FILE")
			}
			return e.runFolder(cmd.Context(), f, args, func(ops *folder.Ops, folders []string) (any, error) {
				return ops.Snapshot(cmd.Context(), folders[0], w)
			})
		}}
	snap.Flags().VarP(&nonEmpty{p: &out, why: "name the file, or - for stdout"}, "output", "o", "archive file (default stdout)")
	recov := &cobra.Command{Use: "recover --store URL", Short: "Finish every interrupted folder operation in a store", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.store == "" {
				return usagef("recover needs --store URL")
			}
			return e.runFolder(cmd.Context(), f, nil, func(ops *folder.Ops, _ []string) (any, error) {
				rep, err := ops.Recover(cmd.Context())
				if err == nil && len(rep.Conflicts) > 0 {
					err = &folder.ConflictError{Op: "recover", Keys: rep.Conflicts, N: len(rep.Conflicts)}
				}
				out := fsRecoverReport{RecoverReport: rep}
				if b, ok := ops.Store().Backend().(*fsstore.Backend); ok && err == nil {
					st, serr := b.RemoveStale()
					out.Stale, err = &st, serr
				}
				return out, err
			})
		}}
	ls := &cobra.Command{Use: "ls FOLDER", Short: "List a folder: sub-folders and objects", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.fsList(cmd.Context(), f, args[0])
		}}
	cmd.AddCommand(mv, cp, rm, snap, recov, ls)
	return cmd
}

// resolveFolders opens the store the folders are in and returns it, their
// keys and the store's URL.
func resolveFolders(ctx context.Context, f fsFlags, args []string) (*objstore.Store, []string, string, error) {
	if f.store != "" {
		s, err := openStore(ctx, f.store)
		if err != nil {
			return nil, nil, "", err
		}
		return s, args, f.store, nil
	}
	if len(args) == 0 {
		return nil, nil, "", usagef("give --store URL")
	}
	var storeURL string
	var keys []string
	for _, a := range args {
		su, key, err := objstore.SplitObjectURL(strings.TrimSuffix(a, "/"))
		if u, perr := objstore.ParseURL(a); err != nil && perr == nil && u.Scheme != "file" && strings.Trim(u.Path, "/") == "" {
			// s3://bucket or s3://bucket/: the bucket's root folder (ls lists
			// it; the folder operations refuse the whole bucket themselves).
			root := *u
			root.Path = ""
			su, key, err = root.String(), "", nil
		}
		if err != nil {
			return nil, nil, "", usageError{err}
		}
		if storeURL != "" && su != storeURL {
			return nil, nil, "", usagef("%q and %q are in different stores (%s, %s); give --store URL and paths inside it",
				safetext.Redact(args[0]), safetext.Redact(a), safetext.URL(storeURL), safetext.URL(su))
		}
		storeURL = su
		keys = append(keys, key)
	}
	s, err := openStore(ctx, storeURL)
	return s, keys, storeURL, err
}

func (e *env) runFolder(ctx context.Context, f fsFlags, args []string, run func(*folder.Ops, []string) (any, error)) error {
	if f.concurrency <= 0 {
		return usagef("--concurrency must be positive")
	}
	s, folders, storeURL, err := resolveFolders(ctx, f, args)
	if err != nil {
		return err
	}
	defer s.Close()
	o := &folder.Options{Concurrency: f.concurrency}
	var tm *treelock.Manager
	if f.localLock {
		o.Locker = folder.LocalLocker{L: &pathlock.Locker{}}
	} else {
		tm = treelock.New(s, &treelock.Options{TTL: f.lockTTL})
		defer tm.Close()
		o.Locker = folder.TreeLocker{M: tm, Store: s, Waiting: e.lockWaiting}
	}
	var bar *progress.Bar
	var mu sync.Mutex
	phase := ""
	if !e.json && isTerminal(e.stderr) {
		o.Progress = func(p folder.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Phase != phase {
				bar.Done()
				phase = p.Phase
				bar = progress.NewCounter(e.stderr, p.Phase, p.Total)
			}
			bar.SetCount(p.Done, p.Bytes)
		}
	}
	res, err := run(folder.New(s, o), folders)
	mu.Lock()
	bar.Done()
	mu.Unlock()
	var ce *folder.ConflictError
	var ie *folder.InterruptedError
	switch {
	case errors.As(err, &ie) && ie.Failed:
		// Stopped by a failure (a full disk): the cause, then what was left
		// and what finishes it, as for an interruption; exits 1. The cause
		// stays in the chain for the exit code.
		return fmt.Errorf("%s %s%s stopped: %w: %s; %s", ie.Op, safetext.Escape(ie.Src), arrow(ie.Dst), ie.Err, ie.State(),
			ie.Next("'cairn fs recover --store "+safetext.URL(storeURL)+"'"))
	case errors.As(err, &ie):
		// Lead with what was left and what finishes it; Main exits 130/143.
		return fmt.Errorf("interrupted: %s %s%s: %s; %s", ie.Op, safetext.Escape(ie.Src), arrow(ie.Dst), ie.State(),
			ie.Next("'cairn fs recover --store "+safetext.URL(storeURL)+"'"))
	case errors.Is(err, folder.ErrNotEmpty) || errors.As(err, &ce):
		if e.json {
			_ = e.writeJSON(res)
		}
		return err // exits 3 (exitCode), as folder.ErrInvalid and ErrReserved exit 2
	case err != nil:
		return err
	}
	if e.json {
		return e.writeJSON(res)
	}
	if r, ok := res.(folder.Result); ok {
		w := e.stdout
		if r.Op == "snapshot" {
			w = e.stderr // stdout holds the archive
		}
		if r.Already {
			done := map[string]string{"rename": "renamed", "copy": "copied", "delete": "deleted"}[r.Op]
			fmt.Fprintf(w, "already %s: %s%s (%d objects, %s; an interrupted run was finished by a roll-forward)",
				done, safetext.Escape(r.Src), arrow(r.Dst), r.Objects, progress.Bytes(r.Bytes))
		} else {
			fmt.Fprintf(w, "%s %s%s: %d objects, %s in %.2fs", r.Op, safetext.Escape(r.Src), arrow(r.Dst), r.Objects, progress.Bytes(r.Bytes), r.Seconds)
		}
		if r.Recovered > 0 {
			fmt.Fprintf(w, " (finished %d interrupted operations first)", r.Recovered)
		}
		fmt.Fprintln(w)
	} else if rep, ok := res.(folder.RecoverReport); ok {
		fmt.Fprintf(e.stdout, "recovered %d interrupted operations; removed %d orphaned journals%s\n", len(rep.Finished), rep.Orphans, tombstones(rep))
	} else if rep, ok := res.(fsRecoverReport); ok {
		fmt.Fprintf(e.stdout, "recovered %d interrupted operations; removed %d orphaned journals%s", len(rep.Finished), rep.Orphans, tombstones(rep.RecoverReport))
		if rep.Stale != nil {
			fmt.Fprintf(e.stdout, "; removed %d stale temporary files and uploads (%s)", rep.Stale.Files, progress.Bytes(rep.Stale.Bytes))
		}
		fmt.Fprintln(e.stdout)
	}
	return nil
}

// fsRecoverReport is what 'fs recover' did: the folder package's report and,
// on a store that keeps temporary data of its own (file://), what stale
// temporary data of dead writers it removed.
// tombstones says how many finished journals a recover removed, if any.
func tombstones(rep folder.RecoverReport) string {
	if rep.Tombstones == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d finished journals kept past their hour (tombstones)", rep.Tombstones)
}

type fsRecoverReport struct {
	folder.RecoverReport
	Stale *fsstore.Stale `json:"stale,omitempty"`
}

// lockWaiting says, once, that a folder operation waits for another's lock,
// and for whom: a line on stderr, or an info log record under --json.
func (e *env) lockWaiting(w folder.Wait) {
	paths := append(slices.Clone(w.Write), w.Read...)
	var who []string
	seen := map[string]bool{}
	for _, h := range w.Holders {
		desc := "session " + h.Session
		if h.Who != "" {
			desc = h.Who + " (" + desc + ")"
		}
		if h.Waiting {
			desc += ", queued ahead"
		}
		desc = safetext.Escape(h.Path+": "+h.Mode+" by ") + safetext.Escape(desc)
		if !seen[desc] {
			seen[desc] = true
			who = append(who, desc)
		}
	}
	if e.json {
		e.log.Info("waiting for a folder lock held by another cairn process", "paths", paths, "holders", w.Holders)
		return
	}
	held := "held by another cairn process"
	if len(who) > 0 {
		held = "held by " + strings.Join(who, "; ")
	}
	fmt.Fprintf(e.stderr, "cairn: waiting for the lock on %s: %s\n", safetext.Escape(strings.Join(paths, ", ")), held)
}

func arrow(dst string) string {
	if dst == "" {
		return ""
	}
	return " -> " + safetext.Escape(dst)
}

func (e *env) fsList(ctx context.Context, f fsFlags, arg string) error {
	s, folders, storeURL, err := resolveFolders(ctx, f, []string{arg})
	if err != nil {
		return err
	}
	defer s.Close()
	prefix := strings.Trim(folders[0], "/")
	if prefix != "" {
		prefix += "/"
	}
	// Operations running on, or interrupted in, this folder: its listing is
	// not what it will be once they are finished.
	pending, err := folder.PendingOps(ctx, s, prefix)
	if err != nil {
		return err
	}
	for _, p := range pending {
		if e.json {
			e.log.Warn("the folder has an unfinished operation: running now, or interrupted",
				"op", p.Op, "src", p.Src, "dst", p.Dst, "phase", p.Phase, "journal", p.Journal)
			continue
		}
		fmt.Fprintf(e.stderr, "cairn: warning: unfinished %s %s%s (%s phase, journal %s, started %s): it is running now or was interrupted; "+
			"'cairn fs recover --store %s' finishes it\n", p.Op, safetext.Escape(p.Src), arrow(p.Dst), p.Phase,
			p.Journal, p.Created.Format(time.RFC3339), safetext.URL(storeURL))
	}
	type row struct {
		Key        string           `json:"key"`
		Folder     bool             `json:"folder,omitempty"`
		Size       int64            `json:"size,omitempty"`
		ETag       string           `json:"etag,omitempty"`
		Modified   time.Time        `json:"modified,omitzero"`
		Unfinished []folder.Pending `json:"unfinished,omitempty"`
	}
	var t textTable // aligned by display width: CJK keys take two cells a rune
	for info, err := range s.List(ctx, prefix, &objstore.ListOptions{Delimiter: "/"}) {
		if err != nil {
			return err
		}
		r := row{Key: info.Key, Folder: info.IsPrefix, Size: info.Size, ETag: info.ETag, Modified: info.LastModified}
		if e.json {
			for _, p := range pending {
				if p.Touches(r.Key) {
					r.Unfinished = append(r.Unfinished, p)
				}
			}
			if err := e.writeJSON(r); err != nil {
				return err
			}
			continue
		}
		if r.Folder {
			t.add(safetext.Escape(r.Key))
		} else {
			t.add(safetext.Escape(r.Key), progress.Bytes(r.Size), safetext.Escape(r.ETag), r.Modified.Format(time.RFC3339))
		}
	}
	if !e.json {
		return t.write(e.stdout)
	}
	return nil
}
