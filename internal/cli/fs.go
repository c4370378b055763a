package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/internal/progress"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
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

Exit codes: 0 done, 1 error, 2 usage, 3 destination not empty or objects
changed meanwhile (named on stderr).`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.store, "store", "", "store URL; folders are then paths inside it")
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
	snap.Flags().StringVarP(&out, "output", "o", "", "archive file (default stdout)")
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
				return rep, err
			})
		}}
	ls := &cobra.Command{Use: "ls FOLDER", Short: "List a folder: sub-folders and objects", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.fsList(cmd.Context(), f, args[0])
		}}
	cmd.AddCommand(mv, cp, rm, snap, recov, ls)
	return cmd
}

// resolveFolders opens the store the folders are in and returns their keys.
func resolveFolders(ctx context.Context, f fsFlags, args []string) (*objstore.Store, []string, error) {
	if f.store != "" {
		s, err := openStore(ctx, f.store)
		if err != nil {
			return nil, nil, err
		}
		return s, args, nil
	}
	if len(args) == 0 {
		return nil, nil, usagef("give --store URL")
	}
	var storeURL string
	var keys []string
	for _, a := range args {
		su, key, err := objstore.SplitObjectURL(strings.TrimSuffix(a, "/"))
		if err != nil {
			return nil, nil, usageError{err}
		}
		if storeURL != "" && su != storeURL {
			return nil, nil, usagef("%q and %q are in different stores (%s, %s); give --store URL and paths inside it",
				safetext.Redact(args[0]), safetext.Redact(a), safetext.URL(storeURL), safetext.URL(su))
		}
		storeURL = su
		keys = append(keys, key)
	}
	s, err := openStore(ctx, storeURL)
	return s, keys, err
}

func (e *env) runFolder(ctx context.Context, f fsFlags, args []string, run func(*folder.Ops, []string) (any, error)) error {
	if f.concurrency <= 0 {
		return usagef("--concurrency must be positive")
	}
	s, folders, err := resolveFolders(ctx, f, args)
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
		o.Locker = folder.TreeLocker{M: tm}
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
	switch {
	case errors.Is(err, folder.ErrInvalid) || errors.Is(err, folder.ErrReserved):
		return usageError{err}
	case errors.Is(err, folder.ErrNotEmpty) || errors.As(err, &ce):
		if e.json {
			_ = e.writeJSON(res)
		}
		return exitError{code: ExitPrecondition, err: err}
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
		fmt.Fprintf(w, "%s %s%s: %d objects, %s in %.2fs", r.Op, safetext.Escape(r.Src), arrow(r.Dst), r.Objects, progress.Bytes(r.Bytes), r.Seconds)
		if r.Recovered > 0 {
			fmt.Fprintf(w, " (finished %d interrupted operations first)", r.Recovered)
		}
		fmt.Fprintln(w)
	} else if rep, ok := res.(folder.RecoverReport); ok {
		fmt.Fprintf(e.stdout, "recovered %d interrupted operations; removed %d orphaned journals\n", len(rep.Finished), rep.Orphans)
	}
	return nil
}

func arrow(dst string) string {
	if dst == "" {
		return ""
	}
	return " -> " + safetext.Escape(dst)
}

func (e *env) fsList(ctx context.Context, f fsFlags, arg string) error {
	s, folders, err := resolveFolders(ctx, f, []string{arg})
	if err != nil {
		return err
	}
	defer s.Close()
	prefix := strings.Trim(folders[0], "/")
	if prefix != "" {
		prefix += "/"
	}
	var tw *tabwriter.Writer
	var out io.Writer = e.stdout
	if !e.json {
		tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		out = tw
	}
	type row struct {
		Key      string    `json:"key"`
		Folder   bool      `json:"folder,omitempty"`
		Size     int64     `json:"size,omitempty"`
		ETag     string    `json:"etag,omitempty"`
		Modified time.Time `json:"modified,omitzero"`
	}
	for info, err := range s.List(ctx, prefix, &objstore.ListOptions{Delimiter: "/"}) {
		if err != nil {
			return err
		}
		r := row{Key: info.Key, Folder: info.IsPrefix, Size: info.Size, ETag: info.ETag, Modified: info.LastModified}
		if e.json {
			if err := e.writeJSON(r); err != nil {
				return err
			}
			continue
		}
		if r.Folder {
			fmt.Fprintf(out, "%s\t\t\t\n", safetext.Escape(r.Key))
		} else {
			fmt.Fprintf(out, "%s\t%d\t%s\t%s\n", safetext.Escape(r.Key), r.Size, safetext.Escape(r.ETag), r.Modified.Format(time.RFC3339))
		}
	}
	if tw != nil {
		return tw.Flush()
	}
	return nil
}
