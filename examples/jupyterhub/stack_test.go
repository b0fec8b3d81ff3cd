package jupyterhub_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

const (
	// namespace is where the service's pods run (testdata/spawner-service.yaml).
	namespace = "default"
	// hubStartTimeout is JupyterHub's Spawner.start_timeout in the test.
	hubStartTimeout = 20 * time.Second
)

// stack is a JupyterHub with configurable-http-proxy and the
// spawner-service, all on 127.0.0.1, state in one directory. JupyterHub
// runs from the venv the spawnkit-jupyterhub package was installed into
// and loads SpawnkitSpawner by its entry point's name. Every process is
// stopped by its PID in the test's cleanup.
type stack struct {
	tools   tools
	venv    venv
	cluster *testcluster.Cluster
	opts    stackOptions
	dir     string // state: JupyterHub's database, cookie secret, logs

	serviceBin                               string
	serviceToken, adminToken, proxyToken     string
	servicePort, proxyPort, proxyAPI, hubAPI int

	service, proxy, hub *process

	// seenMu guards seenSecrets: the user servers' API tokens the test
	// has read from their environment Secrets (onePod), searched for in
	// the service's log at the end with the stack's own tokens.
	seenMu      sync.Mutex
	seenSecrets []string
}

// stackOptions change the test's JupyterHub configuration.
type stackOptions struct {
	// hubConfig is Python appended to the test's jupyterhub_config.py;
	// it sees the directory of the stack's state as state_dir.
	hubConfig string
	// serviceConfig is the service's -config (default:
	// testdata/spawner-service.yaml); clusters its -clusters file, if any.
	serviceConfig, clusters string
	// kubeconfig is the service's -kubeconfig (default: the cluster's);
	// serviceArgs are more flags for it.
	kubeconfig  string
	serviceArgs []string
	// hubPolicy is the service's -hub-policy file, if any.
	hubPolicy string
	// tls, when set, serves the service's API over TLS with its
	// certificate (-tls-cert-file, -tls-key-file): service_url is https.
	tls *serviceTLS
	// httpClient is the hub's tornado HTTP client, "simple" or "curl"
	// (httpclient_test.go); "": $SPAWNKIT_TEST_HTTP_CLIENT, else
	// JupyterHub's own choice.
	httpClient string
	// adoptKubeSpawner gives the service -adopt-kubespawner.
	adoptKubeSpawner bool
	// serviceEnv is added to the service's environment (KEY=value), as
	// the OTEL_* variables that make it export its spans (trace_test.go).
	serviceEnv []string
}

// serviceTLS is the service's certificate and what verifies it.
type serviceTLS struct {
	// caFile is the CA's certificate (PEM), for service_ca_file.
	caFile            string
	certFile, keyFile string
	// roots verify the certificate as serverName, a name it holds
	// (service_url's host, 127.0.0.1, need not be one).
	roots      *x509.CertPool
	serverName string
}

// newStack installs the Python package (once per test binary), builds the
// service and starts the service, the proxy and JupyterHub.
func newStack(t *testing.T, tl tools, c *testcluster.Cluster, opts stackOptions) *stack {
	t.Helper()
	opts.httpClient = chooseHTTPClient(t, opts.httpClient)
	s := &stack{
		tools: tl, venv: requirePackage(t), cluster: c, opts: opts, dir: t.TempDir(),
		serviceToken: randomToken(), adminToken: randomToken(), proxyToken: randomToken(),
	}
	for _, p := range []*int{&s.servicePort, &s.proxyPort, &s.proxyAPI, &s.hubAPI} {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		*p = port
	}
	// Runs last: the logs are complete once every process has stopped.
	t.Cleanup(func() {
		s.checkNoSecretLogged(t)
		s.checkHTTPClient(t)
		if t.Failed() {
			for _, name := range []string{"spawner-service", "configurable-http-proxy", "jupyterhub"} {
				t.Logf("--- %s.log (last 80 lines) ---\n%s", name, logTail(s.logPath(name), 80))
			}
		}
	})
	t.Cleanup(func() {
		for _, p := range []*process{s.hub, s.proxy, s.service} {
			if p != nil {
				if err := p.stop(15 * time.Second); err != nil {
					t.Error(err)
				}
			}
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin, err := buildService(ctx, s.dir)
	if err != nil {
		t.Fatal(err)
	}
	s.serviceBin = bin
	if err := os.WriteFile(filepath.Join(s.dir, "service-token"), []byte(s.serviceToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.writeHubConfig(t, opts.hubConfig)
	s.startService(ctx, t)
	s.startProxy(ctx, t)
	s.startHub(ctx, t)
	return s
}

func (s *stack) logPath(name string) string { return filepath.Join(s.dir, name+".log") }

func (s *stack) startService(ctx context.Context, t *testing.T) {
	t.Helper()
	config := s.opts.serviceConfig
	if config == "" {
		var err error
		if config, err = filepath.Abs(filepath.Join("testdata", "spawner-service.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := s.opts.kubeconfig
	if kubeconfig == "" {
		kubeconfig = s.cluster.Kubeconfig
	}
	args := []string{
		"-kubeconfig", kubeconfig,
		"-config", config,
		"-listen", fmt.Sprintf("127.0.0.1:%d", s.servicePort),
		"-token-file", filepath.Join(s.dir, "service-token"),
		// The probes are not this test's subject: any free port.
		"-probe-listen", "127.0.0.1:0",
		// The tests count a hub's polls in the request log, whose
		// successful reads are V(1); serviceArgs may set -v again.
		"-v", "1"}
	if s.opts.clusters != "" {
		args = append(args, "-clusters", s.opts.clusters)
	}
	if s.opts.hubPolicy != "" {
		args = append(args, "-hub-policy", s.opts.hubPolicy)
	}
	if s.opts.tls != nil {
		args = append(args, "-tls-cert-file", s.opts.tls.certFile, "-tls-key-file", s.opts.tls.keyFile)
	}
	if s.opts.adoptKubeSpawner {
		args = append(args, "-adopt-kubespawner")
	}
	args = append(args, s.opts.serviceArgs...)
	p, err := startProcess("spawner-service", s.dir, s.logPath("spawner-service"), s.opts.serviceEnv, s.serviceBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	s.service = p
	if err := waitHTTP(ctx, s.serviceClient(), s.serviceURL()+"/v1/healthz", "Authorization: Bearer "+s.serviceToken, http.StatusOK, p); err != nil {
		t.Fatal(err)
	}
}

func (s *stack) startProxy(ctx context.Context, t *testing.T) {
	t.Helper()
	p, err := startProcess("configurable-http-proxy", s.dir, s.logPath("configurable-http-proxy"),
		[]string{"CONFIGPROXY_AUTH_TOKEN=" + s.proxyToken}, s.tools.node, s.tools.chp,
		"--ip", "127.0.0.1", "--port", fmt.Sprint(s.proxyPort),
		"--api-ip", "127.0.0.1", "--api-port", fmt.Sprint(s.proxyAPI),
		"--default-target", fmt.Sprintf("http://127.0.0.1:%d", s.hubAPI),
		"--error-target", fmt.Sprintf("http://127.0.0.1:%d/hub/error", s.hubAPI))
	if err != nil {
		t.Fatal(err)
	}
	s.proxy = p
	if err := waitHTTP(ctx, nil, fmt.Sprintf("http://127.0.0.1:%d/api/routes", s.proxyAPI), "Authorization: token "+s.proxyToken, http.StatusOK, p); err != nil {
		t.Fatal(err)
	}
}

func (s *stack) startHub(ctx context.Context, t *testing.T) {
	t.Helper()
	// JupyterHub from the venv: Debian's, which the venv sees, with the
	// package pip installed there and nothing else on its path.
	env := append([]string{
		"CONFIGPROXY_AUTH_TOKEN=" + s.proxyToken,
		"SPAWNKIT_SERVICE_TOKEN=" + s.serviceToken,
	}, pythonEnv...)
	p, err := startProcess("jupyterhub", s.dir, s.logPath("jupyterhub"), env,
		s.venv.python, "-m", "jupyterhub", "-f", filepath.Join(s.dir, "jupyterhub_config.py"))
	if err != nil {
		t.Fatal(err)
	}
	s.hub = p
	if err := waitHTTP(ctx, nil, s.hubURL()+"/hub/api/users", "Authorization: token "+s.adminToken, http.StatusOK, p); err != nil {
		t.Fatal(err)
	}
}

// restartService and restartHub stop a component (SIGTERM) and start it
// again with the same flags and state.
func (s *stack) restartService(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := s.service.stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.startService(ctx, t)
}

func (s *stack) restartHub(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := s.hub.stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.startHub(ctx, t)
}

func (s *stack) serviceURL() string {
	if s.opts.tls != nil {
		return fmt.Sprintf("https://127.0.0.1:%d", s.servicePort)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", s.servicePort)
}

// serviceClient is an HTTP client for the service's API: over TLS, one
// that verifies its certificate as opts.tls says.
func (s *stack) serviceClient() *http.Client {
	if s.opts.tls == nil {
		return http.DefaultClient
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: s.opts.tls.roots, ServerName: s.opts.tls.serverName, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}
}

// writeHubConfig replaces the Python appended to jupyterhub_config.py
// (stackOptions.hubConfig); a restarted hub reads it.
func (s *stack) writeHubConfig(t *testing.T, hubConfig string) {
	t.Helper()
	s.opts.hubConfig = hubConfig
	if err := os.WriteFile(filepath.Join(s.dir, "jupyterhub_config.py"), []byte(s.hubConfig(t)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hubURL is JupyterHub's public URL: the proxy.
func (s *stack) hubURL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.proxyPort) }

// hubConfig loads the example jupyterhub_config.py and points it at this
// test's processes, ports and directory.
func (s *stack) hubConfig(t *testing.T) string {
	example, err := filepath.Abs("jupyterhub_config.py")
	if err != nil {
		t.Fatal(err)
	}
	spawner := fmt.Sprintf("load_subconfig(%q)\n\nc.SpawnkitSpawner.service_url = %q\n", example, s.serviceURL())
	config := s.hubConfigFile("jupyterhub_test.go", spawner, fmt.Sprintf(`c.JupyterHub.log_level = "DEBUG"
c.Spawner.start_timeout = %[1]d
# The slow-boot profile's server answers once the test lets it go (after
# the screenshot, which can take a minute on a loaded machine).
c.Spawner.http_timeout = 180
c.Spawner.poll_interval = 1
state_dir = %[2]q
`, int(hubStartTimeout/time.Second), s.dir)) + s.opts.hubConfig
	if s.opts.httpClient == "simple" {
		config = hidePycurl + config
	}
	return config
}

// hubConfigFile is a jupyterhub_config.py for this stack: spawner
// (Python that chooses and configures the spawner), then what every
// test's hub shares, which points it at the stack's proxy, ports, state
// directory and admin token, then settings (Python: the test's own
// JupyterHub settings). writtenBy names the file that wrote it.
func (s *stack) hubConfigFile(writtenBy, spawner, settings string) string {
	return fmt.Sprintf(`# Written by %[1]s.
c = get_config()  # noqa
%[2]sc.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.bind_url = "http://127.0.0.1:%[3]d"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:%[4]d"
c.ConfigurableHTTPProxy.should_start = False
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:%[5]d"
c.JupyterHub.db_url = "sqlite:///" + %[6]q
c.JupyterHub.cookie_secret_file = %[7]q
c.JupyterHub.services = [{"name": "spawnkit-test", "api_token": %[8]q}]
c.JupyterHub.load_roles = [{"name": "admin", "services": ["spawnkit-test"]}]
# The REST API answers a start at once (202) instead of after 10 s.
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
%[9]s`, writtenBy, spawner, s.proxyPort, s.hubAPI, s.proxyAPI,
		filepath.Join(s.dir, "jupyterhub.sqlite"), filepath.Join(s.dir, "cookie_secret"), s.adminToken, settings)
}

// serverPath is a server's path below /users/{user} in JupyterHub's API:
// /server for the default server, /servers/{name} for a named one.
func serverPath(user, server string) string {
	if server == "" {
		return "/users/" + url.PathEscape(user) + "/server"
	}
	return "/users/" + url.PathEscape(user) + "/servers/" + url.PathEscape(server)
}

// userURL is a server's prefix behind the proxy.
func userURL(user, server string) string {
	p := "/user/" + url.PathEscape(user) + "/"
	if server != "" {
		p += url.PathEscape(server) + "/"
	}
	return p
}

// api calls JupyterHub's REST API as the admin service.
func (s *stack) api(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.hubURL()+"/hub/api"+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "token "+s.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// mustAPI is api that fails the test unless the status is one of want.
func (s *stack) mustAPI(ctx context.Context, t *testing.T, method, path string, body any, want ...int) []byte {
	t.Helper()
	code, data, err := s.api(ctx, method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	for _, w := range want {
		if code == w {
			return data
		}
	}
	t.Fatalf("%s %s = %d %s, want %v", method, path, code, data, want)
	return nil
}

func (s *stack) createUser(ctx context.Context, t *testing.T, user string) {
	t.Helper()
	s.mustAPI(ctx, t, http.MethodPost, "/users/"+url.PathEscape(user), nil, http.StatusCreated, http.StatusConflict)
}

// startServer asks JupyterHub to start a server with user options (a
// JSON object).
func (s *stack) startServer(ctx context.Context, t *testing.T, user, server string, options any) {
	t.Helper()
	s.mustAPI(ctx, t, http.MethodPost, serverPath(user, server), options, http.StatusCreated, http.StatusAccepted)
}

// hubServer is a server as JupyterHub's API reports it.
type hubServer struct {
	Name        string         `json:"name"`
	Ready       bool           `json:"ready"`
	Pending     *string        `json:"pending"`
	URL         string         `json:"url"`
	UserOptions map[string]any `json:"user_options"`
	State       map[string]any `json:"state"`
}

// servers returns a user's servers as JupyterHub's API lists them.
func (s *stack) servers(ctx context.Context, user string) (map[string]hubServer, error) {
	code, data, err := s.api(ctx, http.MethodGet, "/users/"+url.PathEscape(user), nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET user %s = %d %s", user, code, data)
	}
	var u struct {
		Servers map[string]hubServer `json:"servers"`
	}
	if err := json.Unmarshal(data, &u); err != nil {
		return nil, fmt.Errorf("user %s: %w", user, err)
	}
	return u.Servers, nil
}

// waitServer polls JupyterHub's API until cond holds for the user's
// server (absent: nil), or fails the test after timeout.
func (s *stack) waitServer(ctx context.Context, t *testing.T, user, server string, timeout time.Duration, what string, cond func(*hubServer) bool) {
	t.Helper()
	testutil.EventuallyEvery(t, 200*time.Millisecond, timeout, user+":"+server+" "+what, func() error {
		all, err := s.servers(ctx, user)
		if err != nil {
			return fmt.Errorf("%s:%s did not become %s; last: %w", user, server, what, err)
		}
		var hs *hubServer
		if v, ok := all[server]; ok {
			hs = &v
		}
		if !cond(hs) {
			return fmt.Errorf("%s:%s did not become %s; last: %+v", user, server, what, hs)
		}
		return nil
	})
}

// waitPolls waits until the spawner-service has answered n more status
// requests (JupyterHub's polls) for each of the servers ({user, server}).
func (s *stack) waitPolls(t *testing.T, servers [][2]string, n int) {
	t.Helper()
	answered := func(us [2]string) int {
		return logCount(s.logPath("spawner-service"), `"msg"="request"`, `"method"="GET"`,
			`"path"="/v1`+serverPath(us[0], us[1])+`"`, `"status"=200`)
	}
	before := make([]int, len(servers))
	for i, us := range servers {
		before[i] = answered(us)
	}
	testutil.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, "the status polls of each server", func() error {
		for i, us := range servers {
			if got := answered(us) - before[i]; got < n {
				return fmt.Errorf("the spawner-service answered %d status requests for %s:%s, want %d", got, us[0], us[1], n)
			}
		}
		return nil
	})
}

func ready(hs *hubServer) bool { return hs != nil && hs.Ready }
func gone(hs *hubServer) bool  { return hs == nil }

// progressEvent is one event of JupyterHub's progress stream.
type progressEvent struct {
	Progress *int   `json:"progress"`
	Message  string `json:"message"`
	Ready    bool   `json:"ready"`
	Failed   bool   `json:"failed"`
	URL      string `json:"url"`
	// TraceID is the start's trace, on the events SpawnkitSpawner passes
	// on from the service (not on JupyterHub's own).
	TraceID string `json:"trace_id"`
}

// progress reads JupyterHub's progress stream of a server until its ready
// or failed event, or ctx ends.
func (s *stack) progress(ctx context.Context, user, server string) ([]progressEvent, error) {
	return s.progressEach(ctx, user, server, nil)
}

// progressEach is progress that also hands each event to each (when not
// nil) as it arrives, so a test can act while the stream is still open.
func (s *stack) progressEach(ctx context.Context, user, server string, each func(progressEvent)) ([]progressEvent, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.hubURL()+"/hub/api"+serverPath(user, server)+"/progress", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "token "+s.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("progress of %s:%s = %s %s", user, server, resp.Status, data)
	}
	var events []progressEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev progressEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return events, fmt.Errorf("progress event %q: %w", data, err)
		}
		events = append(events, ev)
		if each != nil {
			each(ev)
		}
		if ev.Ready || ev.Failed {
			return events, nil
		}
	}
	return events, fmt.Errorf("progress of %s:%s ended without ready or failed (%v); events: %+v", user, server, sc.Err(), events)
}

// viaProxy GETs a path through the proxy and decodes the pod responder's
// answer.
func (s *stack) viaProxy(ctx context.Context, path string) (testcluster.Answer, error) {
	var a testcluster.Answer
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.hubURL()+path, nil)
	if err != nil {
		return a, err
	}
	client := &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("GET %s through the proxy = %s %.300s", path, resp.Status, data)
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("GET %s through the proxy: not a pod's answer: %w: %.300s", path, err, data)
	}
	return a, nil
}

// podsOf lists the pods of a server, by spawnkit's (KubeSpawner's)
// annotations.
func (s *stack) podsOf(ctx context.Context, user, server string) ([]corev1.Pod, error) {
	list, err := s.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.Annotations[naming.AnnotationUsername] == user && p.Annotations[naming.AnnotationServername] == server {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// onePod returns the server's only pod or fails the test.
func (s *stack) onePod(ctx context.Context, t *testing.T, user, server string) corev1.Pod {
	t.Helper()
	pods, err := s.podsOf(ctx, user, server)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 {
		t.Fatalf("%s:%s has %d pods, want 1", user, server, len(pods))
	}
	s.noteSecrets(ctx, pods[0])
	return pods[0]
}

// noteSecrets remembers the values of the Secrets pod's environment
// refers to (the hub's API token for the server among them).
func (s *stack) noteSecrets(ctx context.Context, pod corev1.Pod) {
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			ref := e.ValueFrom
			if ref == nil || ref.SecretKeyRef == nil {
				continue
			}
			sec, err := s.cluster.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				continue // made right after the pod: it may not be there yet
			}
			if v := string(sec.Data[ref.SecretKeyRef.Key]); len(v) >= 16 {
				s.seenMu.Lock()
				s.seenSecrets = append(s.seenSecrets, v)
				s.seenMu.Unlock()
			}
		}
	}
}

// checkNoSecretLogged searches every line the service logged for the
// service's token, the hub's and proxy's, and every user server token
// the test read: none may be there (the service README's promise).
func (s *stack) checkNoSecretLogged(t *testing.T) {
	data, err := os.ReadFile(s.logPath("spawner-service"))
	if err != nil {
		t.Errorf("reading the service's log: %v", err)
		return
	}
	s.seenMu.Lock()
	secrets := append([]string{s.serviceToken, s.adminToken, s.proxyToken}, s.seenSecrets...)
	s.seenMu.Unlock()
	for i, line := range strings.Split(string(data), "\n") {
		for _, sec := range secrets {
			if strings.Contains(line, sec) {
				t.Errorf("spawner-service.log line %d holds a secret (%s...): %s", i+1, sec[:4], line)
			}
		}
	}
	t.Logf("no secret among %d (%d user tokens) in %d lines of the service's log", len(secrets), len(secrets)-3, strings.Count(string(data), "\n"))
}

// podEventTimes lists pod's events as the API server has them, each with
// when it was created, beside when the pod turned ready: what a test
// failing on a missing progress event needs to tell a late event from a
// lost one.
func (s *stack) podEventTimes(ctx context.Context, pod *corev1.Pod) string {
	list, err := s.cluster.Client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)).String(),
	})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			fmt.Fprintf(&b, "pod Ready %s since %s;", c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339))
		}
	}
	for _, e := range list.Items {
		fmt.Fprintf(&b, " %s created %s (eventTime %s)", e.Reason, e.CreationTimestamp.UTC().Format(time.RFC3339),
			e.EventTime.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}

// release lets a server of the slow-boot profile answer: it removes the
// simulated kubelet's hold from its pod, waiting for the pod if need be.
func (s *stack) release(ctx context.Context, t *testing.T, user, server string) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + testcluster.HoldAnnotation + `":null}}}`)
	for {
		pods, err := s.podsOf(ctx, user, server)
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) == 1 {
			if _, err := s.cluster.Client.CoreV1().Pods(namespace).Patch(ctx, pods[0].Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatalf("releasing pod %s: %v", pods[0].Name, err)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("releasing %s:%s: %d pods (want 1): %v", user, server, len(pods), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
