package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// serviceToken is the API token of the measured service.
const serviceToken = "benchreport-service-token"

// pprofOverlay is a file added to cmd/spawnkit-service at build time
// (go build -overlay) when -service-profile asks for profiles:
// the service has no pprof endpoint of its own, and the report's service
// must not differ from the shipped one otherwise.
const pprofOverlay = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
)

func init() {
	if addr := os.Getenv("BENCHREPORT_PPROF"); addr != "" {
		runtime.MemProfileRate = 4096
		http.HandleFunc("/debug/freeosmemory", func(http.ResponseWriter, *http.Request) { debug.FreeOSMemory() })
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
`

// buildService builds cmd/spawnkit-service into dir, as a platform team
// builds it (no race detector), with the pprof overlay when withPprof.
func buildService(ctx context.Context, dir string, withPprof bool) (string, error) {
	out := filepath.Join(dir, "spawnkit-service")
	args := []string{"build", "-o", out}
	if withPprof {
		// The overlay names the file by its path in the package's
		// directory, which go list resolves from the module root.
		root, err := exec.CommandContext(ctx, goTool(), "list", "-f", "{{.Dir}}", "github.com/spawnkit/spawnkit/cmd/spawnkit-service").Output()
		if err != nil {
			return "", fmt.Errorf("finding cmd/spawnkit-service: %w", err)
		}
		src := filepath.Join(dir, "pprof.go")
		overlay := filepath.Join(dir, "overlay.json")
		target := filepath.Join(strings.TrimSpace(string(root)), "zz_benchreport_pprof.go")
		if err := os.WriteFile(src, []byte(pprofOverlay), 0o644); err != nil {
			return "", err
		}
		if err := os.WriteFile(overlay, fmt.Appendf(nil, `{"Replace":{%q:%q}}`, target, src), 0o644); err != nil {
			return "", err
		}
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.CommandContext(ctx, goTool(), append(args, "github.com/spawnkit/spawnkit/cmd/spawnkit-service")...)
	if data, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/spawnkit-service: %w\n%s", err, data)
	}
	return out, nil
}

func goTool() string { return filepath.Join(runtime.GOROOT(), "bin", "go") }

// serviceKubeconfig writes a kubeconfig for the service's own identity
// and returns its path. The identity is a service account's as the API
// server sees one (user system:serviceaccount:<ns>:spawnkit-service in
// group system:serviceaccounts, by a client certificate), bound to
// cluster-admin: API Priority and Fairness then puts its requests in the
// service-accounts flow schema, as it puts a deployed service's, apart
// from the cluster's own components (system:masters, exempt), so that
// the API server's flow-control metrics of that schema are the
// service's requests alone.
func serviceKubeconfig(ctx context.Context, c *testcluster.Cluster, dir string) (string, error) {
	const saNS = "spawnkit-bench"
	user := "system:serviceaccount:" + saNS + ":spawnkit-service"
	rc, err := c.UserConfig(user, "system:serviceaccounts", "system:serviceaccounts:"+saNS)
	if err != nil {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "benchreport-spawnkit-service"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("binding the service's user: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, CertificateAuthority: rc.CAFile}
	kc.AuthInfos["service"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData,
		ClientCertificate: rc.CertFile, ClientKey: rc.KeyFile}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "service"}
	kc.CurrentContext = "bench"
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// svcProc is one running spawnkit-service.
type svcProc struct {
	cmd            *exec.Cmd
	listen, probes string // host:port
	pprof          string // host:port, "" without the overlay
	log            *os.File
	done           chan struct{}
	err            error // set before done closes
}

// startService runs bin with the kubeconfig, the configuration and the
// token file in dir, on fresh loopback addresses, logging to dir/name.log.
func startService(bin, dir, name string, withPprof bool, extra ...string) (*svcProc, error) {
	listen, err := testcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	probes, err := testcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	args := append([]string{"-kubeconfig", filepath.Join(dir, "kubeconfig"), "-config", filepath.Join(dir, "config.yaml"),
		"-token-file", filepath.Join(dir, "token"), "-listen", listen, "-probe-listen", probes}, extra...)
	p := &svcProc{cmd: exec.Command(bin, args...), listen: listen, probes: probes, log: logf, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = os.Environ()
	if withPprof {
		if p.pprof, err = testcluster.FreeAddr(); err != nil {
			return nil, err
		}
		p.cmd.Env = append(p.cmd.Env, "BENCHREPORT_PPROF="+p.pprof)
	}
	// The service dies with this program, whatever ends it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("starting spawnkit-service: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the service as Kubernetes does (SIGTERM), then kills it
// after 30 s.
func (p *svcProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the last n lines of the service's log (n < 0: all).
func (p *svcProc) tail(n int) string {
	data, _ := os.ReadFile(p.log.Name())
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if n < 0 {
		n = len(lines)
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitReady waits until /readyz answers 200: the Manager has recovered
// the cluster's servers.
func (p *svcProc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("spawnkit-service exited (%v):\n%s", p.err, p.tail(20))
		default:
		}
		if resp, err := http.Get("http://" + p.probes + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("spawnkit-service not ready after %v:\n%s", timeout, p.tail(20))
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rssMiB is the process's resident memory (VmRSS) in MiB.
func (p *svcProc) rssMiB() (float64, error) { return p.status("VmRSS") }

// status reads a memory line of /proc/<pid>/status in MiB: VmRSS, or
// its parts RssAnon (the heap, stacks) and RssFile (mapped files: the
// binary's own pages, tens of MiB of them, count in VmRSS).
func (p *svcProc) status(field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, p.cmd.Process.Pid)
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// cpu is the process's user and system CPU time so far, from
// /proc/<pid>/stat (utime and stime, fields 14 and 15).
func (p *svcProc) cpu() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", p.cmd.Process.Pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// metrics scrapes the service's /metrics.
func (p *svcProc) metrics(ctx context.Context) (metricSet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.probes+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// freeOSMemory makes the service collect its garbage and return every
// free page to the OS (debug.FreeOSMemory, the pprof overlay's): what
// RSS is left then is what the runtime cannot give back.
func (p *svcProc) freeOSMemory(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.pprof+"/debug/freeosmemory", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// profile saves the service's /debug/pprof/<what> (the pprof overlay's)
// to path.
func (p *svcProc) profile(ctx context.Context, what, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.pprof+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/%s: %d %s", what, resp.StatusCode, data)
	}
	return os.WriteFile(path, data, 0o644)
}

// apiServerMetrics scrapes the API server's /metrics.
func apiServerMetrics(ctx context.Context, client kubernetes.Interface) (metricSet, error) {
	data, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseMetrics(strings.NewReader(string(data)))
}

// metricSet is a scrape, by family name.
type metricSet map[string]*dto.MetricFamily

func parseMetrics(r io.Reader) (metricSet, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	return metricSet(fams), err
}

// sum adds the values (a counter's, a gauge's, or a histogram's sum and
// count) of the family's series whose labels include every pair of
// match (name, value, ...).
func (s metricSet) sum(name string, match ...string) (value, count float64) {
	f := s[name]
	if f == nil {
		return 0, 0
	}
series:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(match); i += 2 {
			if label(m, match[i]) != match[i+1] {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			value += m.GetCounter().GetValue()
		case m.Gauge != nil:
			value += m.GetGauge().GetValue()
		case m.Histogram != nil:
			value += m.GetHistogram().GetSampleSum()
			count += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return value, count
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// meanDelta is the mean of a histogram's observations between two
// scrapes, in milliseconds (0 without any).
func meanDelta(before, after metricSet, name string, match ...string) (meanMs, n float64) {
	s0, c0 := before.sum(name, match...)
	s1, c1 := after.sum(name, match...)
	if c1 <= c0 {
		return 0, 0
	}
	return (s1 - s0) / (c1 - c0) * 1000, c1 - c0
}
