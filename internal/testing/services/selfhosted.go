package services

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SeaweedFSModule is the pinned SeaweedFS (4.53) served by the Go module
// proxy. `go install` refuses it (its go.mod has replace directives), so
// BuildSeaweedFS downloads the module and builds ./weed inside a copy.
const SeaweedFSModule = "github.com/seaweedfs/seaweedfs@v0.0.0-20261109003541-7506e5f91cd6"

// CephPackages are the Debian packages (bookworm: Ceph 16.2.15, Pacific) a
// single-node Ceph cluster with the RADOS Gateway needs.
var CephPackages = []string{"radosgw", "ceph-mon", "ceph-osd", "ceph-common"}

// cephBinaries are the programs StartCeph runs, from CephPackages.
var cephBinaries = []string{"radosgw", "radosgw-admin", "ceph-mon", "ceph-osd", "ceph", "monmaptool", "ceph-authtool"}

// CephBinary returns the path of radosgw and whether every program a Ceph
// cluster needs is on PATH.
func CephBinary() (string, bool) {
	for _, b := range cephBinaries {
		if _, err := exec.LookPath(b); err != nil {
			return "/usr/bin/radosgw", false
		}
	}
	p, _ := exec.LookPath("radosgw")
	return p, true
}

// BuildSeaweedFS builds the pinned SeaweedFS into bin: `go mod download`
// of the module, a writable copy of it in a temporary directory, and
// `CGO_ENABLED=0 go build ./weed` inside it (about 11 minutes on 2 cores).
func BuildSeaweedFS(ctx context.Context, bin string, log io.Writer) error {
	dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", SeaweedFSModule)
	dl.Dir = os.TempDir()
	dl.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	dl.Stderr = log
	out, err := dl.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s: %w", SeaweedFSModule, err)
	}
	var dir string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), `"Dir": "`); ok {
			dir = strings.TrimSuffix(strings.TrimSuffix(v, ","), `"`)
		}
	}
	if dir == "" {
		return fmt.Errorf("go mod download %s named no directory: %s", SeaweedFSModule, out)
	}
	tmp, err := os.MkdirTemp("", "cairn-seaweedfs-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	// The module cache is read-only; the build wants to write go.sum & co.
	if out, err := exec.CommandContext(ctx, "cp", "-r", dir, src).CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s: %w: %s", dir, err, out)
	}
	if out, err := exec.CommandContext(ctx, "chmod", "-R", "u+w", src).CombinedOutput(); err != nil {
		return fmt.Errorf("chmod %s: %w: %s", src, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	partial := bin + ".partial"
	b := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", partial, "./weed")
	b.Dir = src
	b.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false -mod=mod", "GOWORK=off")
	b.Stdout, b.Stderr = log, log
	if err := b.Run(); err != nil {
		os.Remove(partial)
		return fmt.Errorf("building SeaweedFS: %w", err)
	}
	return os.Rename(partial, bin)
}

// StartSeaweedFS starts `weed mini` (master, volume, filer and S3 gateway in
// one process) with its data in o.DataDir. Everything it listens on is on
// 127.0.0.1 at ports chosen here; the admin UI, WebDAV, the Iceberg and Lance
// catalogues and the telemetry report (on by default) are off. The S3
// credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, as the
// server reads them.
func StartSeaweedFS(ctx context.Context, bin string, o Options) (*Server, error) {
	names := []string{"s3", "s3.grpc", "master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc"}
	ports := map[string]int{}
	for _, n := range names {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[n] = p
	}
	args := []string{"mini", "-dir=" + filepath.Join(o.DataDir, "data"),
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
		"-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false",
		"-s3.autoCreateBucket=false",
		// Every bucket is a collection with volumes of its own, and the
		// tests make hundreds: left to size the volume count from the free
		// disk, it ran out of writable volumes within a minute of tests
		// (and answered writes 500). Small volumes, many allowed.
		"-volume.max=10000", "-master.volumeSizeLimitMB=16",
		"-filer.localSocket=" + filepath.Join(o.DataDir, "filer.sock"),
		"-s3.localSocket=" + filepath.Join(o.DataDir, "s3.sock"),
	}
	for _, n := range names {
		flag := "-" + strings.Replace(n, ".grpc", ".port.grpc", 1)
		if !strings.HasSuffix(n, ".grpc") {
			flag = "-" + n + ".port"
		}
		args = append(args, flag+"="+strconv.Itoa(ports[n]))
	}
	if err := os.MkdirAll(filepath.Join(o.DataDir, "data"), 0o755); err != nil {
		return nil, err
	}
	// Its log files go in its data directory, removed with it (by default
	// in the temporary directory, where every start left them).
	cmd := exec.Command(bin, append([]string{"-logdir=" + o.DataDir}, args...)...)
	cmd.Dir = o.DataDir
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=cairnadmin", "AWS_SECRET_ACCESS_KEY=cairnadmin-secret")
	cmd.Env = append(cmd.Env, o.Env...)
	s, err := start(cmd, o)
	if err != nil {
		return nil, err
	}
	s.URL, s.AccessKey, s.SecretKey = fmt.Sprintf("http://127.0.0.1:%d", ports["s3"]), "cairnadmin", "cairnadmin-secret"
	// Ready once the S3 gateway answers and the filer behind it can write: a
	// bucket listing answers before the volume server has registered.
	if err := waitReady(ctx, s, "seaweedfs", o, func() bool { return s3Writable(s) }); err != nil {
		return nil, err
	}
	return s, nil
}

// StartCeph starts a single-node Ceph cluster in o.DataDir — one monitor,
// one OSD on memstore (in memory: data is throw-away), pools of size 1 — and
// the RADOS Gateway on a 127.0.0.1 port, with an S3 user cairnadmin. There is
// no authentication inside the cluster (auth none), which radosgw accepts
// only with every messenger mode "crc" (with the default "secure" it never
// connects). The monitor and the OSD listen on 127.0.0.1 only. The returned
// Server's Stop stops the gateway, the OSD and the monitor.
func StartCeph(ctx context.Context, o Options) (*Server, error) {
	if _, ok := CephBinary(); !ok {
		return nil, fmt.Errorf("ceph is not installed (apt-get install %s)", strings.Join(CephPackages, " "))
	}
	d := o.DataDir
	for _, sub := range []string{"run", "log", "mon/ceph-a", "osd/ceph-0", "rgw"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return nil, err
		}
	}
	monPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	rgwPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	fsid := uuid()
	conf := filepath.Join(d, "ceph.conf")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`[global]
fsid = %[1]s
mon host = v2:127.0.0.1:%[2]d
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms mon client mode = crc
ms mon cluster mode = crc
ms mon service mode = crc
ms client mode = crc
ms cluster mode = crc
ms service mode = crc
run dir = %[3]s/run
admin socket = %[3]s/run/$name.asok
log file = %[3]s/log/$name.log
mon data = %[3]s/mon/$cluster-$id
osd data = %[3]s/osd/$cluster-$id
keyring = %[3]s/keyring
osd objectstore = memstore
memstore device bytes = 2147483648
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
mon max pg per osd = 1000
rgw frontends = beast endpoint=127.0.0.1:%[4]d
rgw data = %[3]s/rgw
`, fsid, monPort, d, rgwPort)), 0o644)
	if err != nil {
		return nil, err
	}
	run := func(name string, args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, name, append([]string{"-c", conf}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w: %s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run("monmaptool", "--create", "--addv", "a", fmt.Sprintf("[v2:127.0.0.1:%d]", monPort), "--fsid", fsid, filepath.Join(d, "monmap")); err != nil {
		return nil, err
	}
	if _, err := run("ceph-authtool", "--create-keyring", filepath.Join(d, "keyring"), "--gen-key", "-n", "mon.", "--cap", "mon", "allow *"); err != nil {
		return nil, err
	}
	if _, err := run("ceph-mon", "-i", "a", "--mkfs", "--monmap", filepath.Join(d, "monmap")); err != nil {
		return nil, err
	}
	var procs []*Server
	stopAll := func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Stop()
		}
	}
	daemon := func(log string, args ...string) (*Server, error) {
		cmd := exec.Command(args[0], append([]string{"-c", conf, "-f"}, args[1:]...)...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), o.Env...)
		so := o
		so.LogFile = filepath.Join(d, "log", log)
		s, err := start(cmd, so)
		if err != nil {
			return nil, err
		}
		procs = append(procs, s)
		return s, nil
	}
	if _, err := daemon("mon.out", "ceph-mon", "-i", "a"); err != nil {
		return nil, err
	}
	osdUUID := uuid()
	id, err := run("ceph", "osd", "new", osdUUID)
	if err != nil {
		stopAll()
		return nil, err
	}
	if _, err := run("ceph-osd", "-i", id, "--mkfs", "--osd-uuid", osdUUID); err != nil {
		stopAll()
		return nil, err
	}
	if _, err := daemon("osd.out", "ceph-osd", "-i", id); err != nil {
		stopAll()
		return nil, err
	}
	// radosgw-admin talks to RADOS directly: it waits for the OSD.
	if _, err := run("radosgw-admin", "user", "create", "--uid", "cairn", "--display-name", "cairn",
		"--access-key", "cairnadmin", "--secret", "cairnadmin-secret"); err != nil {
		stopAll()
		return nil, err
	}
	rgw, err := daemon("rgw.out", "radosgw", "-n", "client.rgw")
	if err != nil {
		stopAll()
		return nil, err
	}
	s := &Server{Cmd: rgw.Cmd, done: rgw.done, others: procs[:len(procs)-1]}
	s.URL, s.AccessKey, s.SecretKey = fmt.Sprintf("http://127.0.0.1:%d", rgwPort), "cairnadmin", "cairnadmin-secret"
	ro := o
	ro.LogFile = filepath.Join(d, "log", "client.rgw.log")
	if err := waitReady(ctx, s, "ceph radosgw", ro, func() bool { return s3Writable(s) }); err != nil {
		return nil, err
	}
	return s, nil
}

// s3Writable reports whether an S3 server answers a signed request: a
// bucket created, an object written and deleted, the bucket deleted.
func s3Writable(s *Server) bool {
	bucket := "cairn-ready-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	steps := []struct{ method, path string }{
		{http.MethodPut, "/" + bucket}, {http.MethodPut, "/" + bucket + "/ready"},
		{http.MethodDelete, "/" + bucket + "/ready"}, {http.MethodDelete, "/" + bucket},
	}
	for _, st := range steps {
		status, err := signedRequest(s, st.method, st.path)
		if err != nil || status >= 300 {
			return false
		}
	}
	return true
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// signedRequest sends an empty-bodied request signed with s's credentials
// (SigV4, us-east-1) and returns its status.
func signedRequest(s *Server, method, path string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, nil)
	if err != nil {
		return 0, err
	}
	const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	creds := aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, emptySHA256, "s3", "us-east-1", time.Now()); err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
