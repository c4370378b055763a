// Command sqlitedrivers measures cairn's SQLite ledger workloads on several
// SQLite drivers in one run: it builds one binary per driver (cmd/modernc,
// cmd/wasm2go, cmd/cgo, wazero/), reports each binary's size and whether it
// is static, then runs every workload on every driver, rep after rep, the
// drivers' order rotated each rep, each run a fresh process on a fresh file,
// and prints median rates and the median of each rep's ratio to modernc.
//
//	cd cmd/cairn/internal/bench/sqlitedrivers && go run . [-reps 3]
//
// It is its own module (as are work/ and wazero/): cairn's go.mod and binary
// gain no dependency, and cairn's ./... (its build, lint and CI) skips it.
package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench/sqlitedrivers/work"
)

type drv struct {
	name, dir, desc string
	cgo             bool
	bin             string
}

var drivers = []*drv{
	{name: "modernc", dir: "./cmd/modernc", desc: "modernc.org/sqlite (C translated to Go; cairn's driver)"},
	{name: "wasm2go", dir: "./cmd/wasm2go", desc: "github.com/ncruces/go-sqlite3 v0.37 (WebAssembly build translated to Go by wasm2go)"},
	{name: "wazero", dir: "./wazero", desc: "github.com/ncruces/go-sqlite3 v0.32 (WebAssembly build run by wazero)"},
	{name: "cgo", dir: "./cmd/cgo", desc: "github.com/mattn/go-sqlite3 (cgo)", cgo: true},
}

func main() {
	reps := flag.Int("reps", 3, "repetitions of every workload on every driver")
	dir := flag.String("dir", os.TempDir(), "directory for the database files")
	only := flag.String("workloads", "record,naive,intake,fold,fold-update", "workloads, comma-separated")
	drvs := flag.String("drivers", "modernc,wasm2go,wazero,cgo", "drivers, comma-separated (modernc first: ratios are to it)")
	prof := flag.String("cpuprofile", "", "directory: write a CPU profile of each driver's last rep of each workload there")
	var pass []string
	flag.Func("w", "flag passed to every workload run (e.g. -w -batches=100)", func(s string) error { pass = append(pass, s); return nil })
	flag.Parse()
	if err := runAll(*reps, *dir, strings.Split(*only, ","), strings.Split(*drvs, ","), pass, *prof); err != nil {
		fmt.Fprintln(os.Stderr, "sqlitedrivers:", err)
		os.Exit(1)
	}
}

func runAll(reps int, dir string, workloads, names, pass []string, prof string) error {
	bins, err := os.MkdirTemp("", "sqlitedrivers-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bins)
	var use []*drv
	for _, n := range names {
		i := slices.IndexFunc(drivers, func(d *drv) bool { return d.name == n })
		if i < 0 {
			return fmt.Errorf("unknown driver %q", n)
		}
		use = append(use, drivers[i])
	}
	fmt.Println("## Binaries (one driver each, go build -trimpath)")
	fmt.Println()
	fmt.Println("| driver | SQLite | size | static | with CGO_ENABLED=0 |")
	fmt.Println("|---|---|---|---|---|")
	for _, d := range use {
		d.bin = filepath.Join(bins, d.name)
		if err := build(d.dir, d.bin, d.cgo); err != nil {
			return err
		}
		ver, err := runOne(d, "version", dir, nil, "")
		if err != nil {
			return err
		}
		nocgo := "builds, static"
		if d.cgo {
			nocgo = noCgo(d, bins, dir)
		}
		fmt.Printf("| %s | %s | %.1f MB | %s | %s |\n", d.name, ver.SQLite, size(d.bin), static(d.bin), nocgo)
	}
	fmt.Println()
	for _, d := range use {
		fmt.Printf("- %s: %s\n", d.name, d.desc)
	}
	fmt.Printf("\nload before: %s\n", uptime())
	res := map[string]map[string][]*work.Result{} // workload -> driver -> reps
	for _, w := range workloads {
		res[w] = map[string][]*work.Result{}
	}
	for rep := range reps {
		for _, w := range workloads {
			for i := range use {
				d := use[(i+rep)%len(use)]
				p := ""
				if prof != "" && rep == reps-1 {
					p = filepath.Join(prof, d.name+"-"+w+".pprof")
				}
				r, err := runOne(d, w, dir, pass, p)
				if err != nil {
					return err
				}
				res[w][d.name] = append(res[w][d.name], r)
				fmt.Fprintf(os.Stderr, "rep %d %-11s %-8s %10.0f %s/s  p50 %.2f ms  p99 %.2f ms\n", rep+1, w, d.name, r.Rate, r.Unit, r.P50MS, r.P99MS)
			}
		}
	}
	fmt.Printf("load after: %s\n\n", uptime())
	fmt.Printf("## Workloads (%d reps; rate: median (min–max); ratio: median of the reps' ratios to %s, > 1 is faster; "+
		"CPU per row: user + system CPU of the timed part over its rows, median; CPU ratio: %s's CPU per row over the driver's, median of the reps)\n\n", reps, use[0].name, use[0].name)
	for _, w := range workloads {
		base := res[w][use[0].name]
		fmt.Printf("### %s (%s)\n\n", w, describe(base[0]))
		fmt.Println("| driver | rate (wall) | ratio | CPU per row | CPU ratio | p50 / p99 per tx | open | where the wall time goes |")
		fmt.Println("|---|---|---|---|---|---|---|---|")
		for _, d := range use {
			rs := res[w][d.name]
			rates := make([]float64, len(rs))
			ratios := make([]float64, len(rs))
			cpus := make([]float64, len(rs))
			cpuRatios := make([]float64, len(rs))
			for i, r := range rs {
				rates[i], ratios[i] = r.Rate, r.Rate/base[i].Rate
				cpus[i] = r.CPUSecs / float64(r.Rows) * 1e6
				cpuRatios[i] = (base[i].CPUSecs / float64(base[i].Rows)) / (r.CPUSecs / float64(r.Rows))
			}
			last := median(rs, func(r *work.Result) float64 { return r.Rate })
			fmt.Printf("| %s | %s %s/s (%s–%s) | %.2f× | %s µs | %.2f× | %.2f / %.2f ms | %.0f ms | %s |\n", d.name, num(med(rates)), rs[0].Unit,
				num(slices.Min(rates)), num(slices.Max(rates)), med(ratios), cpuNum(med(cpus)), med(cpuRatios), last.P50MS, last.P99MS, last.OpenMS, phases(last))
		}
		fmt.Println()
	}
	return nil
}

func build(dir, out string, cgo bool) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	env := "CGO_ENABLED=0"
	if cgo {
		env = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), env)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", dir, err, b)
	}
	return nil
}

// noCgo says what becomes of the cgo driver without cgo, and whether it
// links statically with cgo (glibc, -extldflags -static).
func noCgo(d *drv, bins, dir string) string {
	out := filepath.Join(bins, d.name+"-nocgo")
	var s string
	if err := build(d.dir, out, false); err != nil {
		s = "does not build"
	} else if _, err := runOne(&drv{name: d.name, bin: out}, "version", dir, nil, ""); err != nil {
		s = "builds, but " + strings.TrimSpace(strings.SplitN(err.Error(), "\n", 2)[0])
	} else {
		s = "works"
	}
	st := filepath.Join(bins, d.name+"-static")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "sqlite_omit_load_extension,osusergo,netgo",
		"-ldflags", "-linkmode=external -extldflags=-static", "-o", st, ".")
	cmd.Dir = d.dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return s + "; static cgo link fails: " + strings.TrimSpace(string(b))
	}
	if _, err := runOne(&drv{name: d.name, bin: st}, "version", dir, nil, ""); err != nil {
		return s + "; static cgo link builds but fails: " + err.Error()
	}
	return fmt.Sprintf("%s; with cgo and `-extldflags=-static` (glibc): %.1f MB, %s, runs", s, size(st), static(st))
}

func runOne(d *drv, w, dir string, pass []string, prof string) (*work.Result, error) {
	args := append([]string{"-workload", w, "-dir", dir}, pass...)
	if prof != "" {
		args = append(args, "-cpuprofile", prof)
	}
	cmd := exec.Command(d.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", d.name, w, err, strings.TrimSpace(stderr.String()))
	}
	var r work.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %q", d.name, w, err, stdout.String())
	}
	return &r, nil
}

func size(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / 1e6
}

// static says whether an ELF file needs a dynamic loader or shared libraries.
func static(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			libs, _ := f.ImportedLibraries()
			return "no (dynamic: " + strings.Join(libs, ", ") + ")"
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return "no (" + strings.Join(libs, ", ") + ")"
	}
	return "yes"
}

func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return "load average " + strings.Join(f[:3], " ") + fmt.Sprintf(" on %d CPUs", numCPU())
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return bytes.Count(b, []byte("\nprocessor")) + 1
}

func med(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// median returns the run with the median of f.
func median(rs []*work.Result, f func(*work.Result) float64) *work.Result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b *work.Result) int {
		switch {
		case f(a) < f(b):
			return -1
		case f(a) > f(b):
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

func num(v float64) string {
	switch {
	case v >= 10_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func cpuNum(us float64) string {
	if us >= 100 {
		return fmt.Sprintf("%.0f", us)
	}
	return fmt.Sprintf("%.1f", us)
}

func describe(r *work.Result) string {
	switch r.Workload {
	case "record":
		return fmt.Sprintf("old Record: %d events in %d transactions of 1,000 random keys over 100k prefilled rows: SELECT the batch, upsert 31-column rows 64/8/1 at a time", r.Rows, r.Txs)
	case "naive":
		return fmt.Sprintf("naive: %d events, one transaction each: SELECT, then INSERT or UPDATE", r.Rows)
	case "intake":
		return fmt.Sprintf("intake log: %d appends of one 200 KB TEXT blob, one transaction each", r.Rows)
	case "fold":
		return fmt.Sprintf("fold into an empty table: one INSERT … SELECT … FROM json_each ON CONFLICT DO UPDATE of %d rows, one transaction", r.Rows)
	case "fold-jsonb":
		return fmt.Sprintf("fold into an empty table as in fold, with jsonb_each(jsonb(?)) instead of json_each(?): %d rows, one transaction", r.Rows)
	case "fold-update":
		return fmt.Sprintf("fold over existing rows: the same statement, %d rows that all conflict (updates), one transaction", r.Rows)
	}
	return r.Workload
}

func phases(r *work.Result) string {
	if len(r.Phases) == 0 {
		return ""
	}
	var keys []string
	for k := range r.Phases {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		if k == "mb_per_s" {
			parts = append(parts, fmt.Sprintf("%.0f MB/s", r.Phases[k]))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*r.Phases[k]/r.Secs))
	}
	return strings.Join(parts, ", ")
}
