package service

// What the tests share: a namespace and configuration of their own, a
// running service on free addresses, requests, and waits on them.

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

const (
	// binTimeout bounds a process's start to ready and each wait on the
	// cluster.
	binTimeout = 60 * time.Second
	// binReload is the -reload-interval of every process here;
	// reloadBound bounds how long a changed file may take to show
	// (many intervals: a race-instrumented build on two cores).
	binReload   = 100 * time.Millisecond
	reloadBound = 10 * time.Second
	// exitBound bounds how long a refused start may take to exit.
	exitBound = 20 * time.Second
)

// binService is one run of the binary on free loopback addresses.
type binService struct {
	*proc
	listen, probes string // host:port
}

// binEnv is a namespace of the test's own, with a configuration that
// puts servers in it and a token file.
type binEnv struct {
	c         *testcluster.Cluster
	ns        string
	config    string
	tokenFile string
}

func newBinEnv(t *testing.T, c *testcluster.Cluster, token string) *binEnv {
	t.Helper()
	ns, err := c.Client.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bin-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), ns.Name, metav1.DeleteOptions{})
	})
	dir := t.TempDir()
	e := &binEnv{c: c, ns: ns.Name, config: filepath.Join(dir, "config.yaml"), tokenFile: filepath.Join(dir, "token")}
	writeTestFile(t, e.config, fmt.Sprintf("namespace: %s\nimage: quay.io/jupyter/base-notebook:2024-01-01\n", e.ns))
	writeTestFile(t, e.tokenFile, token+"\n")
	return e
}

// args are the flags every run gets: the cluster, the configuration, the
// token, fresh addresses and the short reload interval. Flags given
// later on the command line win.
func (e *binEnv) args(t *testing.T) (args []string, listen, probes string) {
	listen, probes = freeAddr(t), freeAddr(t)
	return []string{"-kubeconfig", e.c.Kubeconfig, "-config", e.config, "-token-file", e.tokenFile,
		"-listen", listen, "-probe-listen", probes, "-reload-interval", binReload.String()}, listen, probes
}

func (e *binEnv) start(t *testing.T, name string, extra ...string) *binService {
	t.Helper()
	args, listen, probes := e.args(t)
	return &binService{proc: startProc(t, name, nil, append(args, extra...)...), listen: listen, probes: probes}
}

// mustRun fails the test if the process has exited.
func (s *binService) mustRun(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		t.Fatalf("%s exited: %v\n%s", s.name, s.err, s.out.String())
	default:
	}
}

// readyz is the process's /readyz.
func (s *binService) readyz(t *testing.T) (int, string) {
	return get(t.Context(), httpClient(nil), "http://"+s.probes+"/readyz", "")
}

func (s *binService) waitReady(t *testing.T) {
	t.Helper()
	testutil.EventuallyEvery(t, poll, binTimeout, s.name+" /readyz 200", func() error {
		s.mustRun(t)
		code, body := s.readyz(t)
		return pending(code == http.StatusOK, fmt.Sprintf("%d %q", code, body))
	})
}

// waitLines waits until the output has more than n lines containing
// every sub, and returns them.
func (s *binService) waitLines(t *testing.T, n int, what string, sub ...string) []string {
	t.Helper()
	var lines []string
	testutil.EventuallyEvery(t, poll, reloadBound, s.name+" to log "+what, func() error {
		lines = s.lines(sub...)
		return pending(len(lines) > n, fmt.Sprintf("%d lines with %q", len(lines), sub))
	})
	return lines
}

// binReply is one API answer.
type binReply struct {
	code   int
	header http.Header
	body   string
}

// binDo makes one request (with a bearer token when not ""); a connection
// error is code 0 with the error as body.
func binDo(t *testing.T, client *http.Client, method, url, token string) binReply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return binReply{body: err.Error()}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return binReply{code: resp.StatusCode, header: resp.Header, body: string(data)}
}

// reason is the reason of a JSON error answer.
func (r binReply) reason() string {
	var e struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal([]byte(r.body), &e)
	return e.Reason
}

func writeTestFile(t *testing.T, file, content string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceFile gives file new content in one rename, as an editor or a
// config management tool does.
func replaceFile(t *testing.T, file, content string) {
	t.Helper()
	tmp := file + ".new"
	writeTestFile(t, tmp, content)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testcluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// get makes one GET (with a bearer token when not ""), returning the code
// and body; a connection error is code 0.
func get(ctx context.Context, client *http.Client, url, token string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// poll is how often a wait checks its condition: each check costs a
// request to a process or the cluster.
const poll = 50 * time.Millisecond

// pending is a condition's answer to testutil.EventuallyEvery: nil when
// ok, else what it saw.
func pending(ok bool, saw string) error {
	if ok {
		return nil
	}
	return errors.New(saw)
}

// kubeconfigFor writes a kubeconfig file for cfg (a testcluster admin or
// UserConfig identity) into the test's directory.
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// httpClient is a client without keep-alives (each request a new
// connection, as a failover test needs); tlsConfig nil means plain HTTP.
func httpClient(tlsConfig *tls.Config) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	if tlsConfig != nil {
		tr.TLSClientConfig = tlsConfig
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// waitRunning polls a server's status on s until it runs and is ready.
func waitRunning(t *testing.T, s *binService, token, user string) {
	t.Helper()
	client := httpClient(nil)
	testutil.EventuallyEvery(t, poll, binTimeout, user+" running", func() error {
		r := binDo(t, client, http.MethodGet, "http://"+s.listen+serverPath(user), token)
		var st status
		return pending(r.code == http.StatusOK && json.Unmarshal([]byte(r.body), &st) == nil && st.Phase == "running" && st.Ready,
			fmt.Sprintf("%d %s", r.code, r.body))
	})
}
