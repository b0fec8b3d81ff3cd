package service

// End-to-end tests: the service program (newManagerBackend, serve) over
// real HTTP on 127.0.0.1, against the package's simulated cluster. Each
// test has its own namespace and its own service instance; every exchange
// is checked against openapi.yaml as the handler tests' are, and every
// test checks the cluster as well as the answers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/reflector"
)

// e2eTimeout bounds each request (progress streams included) and each
// wait for the cluster.
const e2eTimeout = 60 * time.Second

// e2eConfig is the service's configuration, given the namespace: the
// default profile runs normally, the others make the simulated kubelet
// misbehave.
func e2eConfig(ns string) string {
	return fmt.Sprintf(`namespace: %s
image: quay.io/jupyter/base-notebook:2024-01-01
profile_list:
- display_name: Default
  slug: default
  default: true
- display_name: Never ready
  slug: never-ready
  kubespawner_override:
    extra_annotations:
      %s: %s
- display_name: Exits with 3
  slug: exit3
  kubespawner_override:
    extra_annotations:
      %[2]s: %[4]s
      %[5]s: "3"
      %[6]s: 1s
`, ns, testcluster.BehaviorAnnotation, testcluster.BehaviorNeverReady, testcluster.BehaviorExit,
		testcluster.ExitCodeAnnotation, testcluster.ExitAfterAnnotation)
}

// e2eEnv is one test's namespace, the configuration file naming it, and
// the service's identity: a user with only deploy/role.yaml's Roles there.
type e2eEnv struct {
	c          *testcluster.Cluster
	ns         string
	configFile string
	service    kubernetes.Interface
	// policy is the services' HubPolicy.
	policy HubPolicy
}

func newE2E(t *testing.T) *e2eEnv {
	t.Helper()
	c := testcluster.Require(t, cluster)
	ns, err := c.Client.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "service-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(e2eConfig(ns.Name)), 0o600); err != nil {
		t.Fatal(err)
	}
	return &e2eEnv{c: c, ns: ns.Name, configFile: file, service: serviceIdentity(t, c, ns.Name)}
}

// e2eService is one running instance of the service program.
type e2eService struct {
	url string
	// probes is the base URL of Probes (startServiceWith a registry).
	probes string
	// stop cancels the service's context and returns what serve
	// returned; later calls return the same.
	stop func() error
	// hub, when set, is sent as HubHeader (see as).
	hub string
}

// as is s for requests of the hub named hub.
func (s *e2eService) as(hub string) *e2eService {
	c := *s
	c.hub = hub
	return &c
}

// startService runs the package as a Go hub would mount it: a Manager
// over the configuration file and New's handler on a loopback port with
// the test token; the test's cleanup stops both.
func (e *e2eEnv) startService(t *testing.T) *e2eService {
	t.Helper()
	return e.startServiceWith(t, testr.New(t), nil)
}

// startServiceWith is startService logging to log and, with reg,
// registering every metric there and serving Probes (its /metrics from
// reg) on a loopback port of its own.
func (e *e2eEnv) startServiceWith(t *testing.T, log logr.Logger, reg *prometheus.Registry) *e2eService {
	t.Helper()
	var registerer prometheus.Registerer
	if reg != nil {
		registerer = reg
	}
	data, err := os.ReadFile(e.configFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kubespawner.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	registry, err := reflector.New(reflector.Options{Client: e.service, Registerer: registerer})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Options{Client: e.service, Registry: registry, Config: cfg, Registerer: registerer})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Manager: m, Token: func() string { return testToken }, Log: log, Registerer: registerer, HubPolicy: e.policy})
	if err != nil {
		t.Fatal(err)
	}
	var probes string
	if reg != nil {
		ph, err := Probes(ProbeOptions{Manager: m, Gatherer: reg})
		if err != nil {
			t.Fatal(err)
		}
		pln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: ph, ReadHeaderTimeout: 10 * time.Second}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = srv.Serve(pln)
		}()
		t.Cleanup(func() {
			_ = srv.Close()
			<-served
		})
		probes = "http://" + pln.Addr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(t.Context(), log))
	done := make(chan error, 1)
	go func() {
		defer registry.Close()
		done <- serveForTest(ctx, ln, m, h)
	}()
	var (
		once    sync.Once
		stopErr error
	)
	s := &e2eService{url: "http://" + ln.Addr().String(), probes: probes}
	s.stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("serve returned %v, want nil after its context ended", err)
		}
	})
	return s
}

// exchange is one request and its answer, read to the end.
type exchange struct {
	req  *http.Request
	body string
	resp *http.Response
	data []byte
	err  error
}

// send makes one request with the test token; it does not touch t, so a
// goroutine may call it.
func (s *e2eService) send(ctx context.Context, method, path, body string) exchange {
	x := exchange{body: body}
	x.req, x.err = http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(body))
	if x.err != nil {
		return x
	}
	x.req.Header.Set("Authorization", "Bearer "+testToken)
	if s.hub != "" {
		x.req.Header.Set(HubHeader, s.hub)
	}
	if body != "" {
		x.req.Header.Set("Content-Type", "application/json")
	}
	if x.resp, x.err = http.DefaultClient.Do(x.req); x.err != nil {
		return x
	}
	return x.read()
}

// read reads the rest of the answer and closes it.
func (x exchange) read() exchange {
	defer x.resp.Body.Close()
	x.data, x.err = io.ReadAll(x.resp.Body)
	return x
}

// check fails the test on a transport error and checks the exchange
// against openapi.yaml.
func (x exchange) check(t *testing.T) (*http.Response, []byte) {
	t.Helper()
	if x.err != nil {
		t.Fatalf("%s %s: %v", x.req.Method, x.req.URL.Path, x.err)
	}
	validateExchange(t, x.req, []byte(x.body), x.resp, x.data, true)
	return x.resp, x.data
}

// do makes one request, bounded by e2eTimeout, and checks it.
func (s *e2eService) do(t *testing.T, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), e2eTimeout)
	defer cancel()
	return s.send(ctx, method, path, body).check(t)
}

// status is do for an answer that must be a status with the given code.
func (s *e2eService) status(t *testing.T, method, path, body string, code int) serverStatus {
	t.Helper()
	resp, data := s.do(t, method, path, body)
	if resp.StatusCode != code {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, code)
	}
	return decodeStatus(t, data)
}

// progress reads a whole progress stream and checks that it is well
// formed: ids 1, 2, ... in order, progress never going back, and one
// final event of progress 100, last.
func (s *e2eService) progress(t *testing.T, path string) []sseEvent {
	t.Helper()
	resp, data := s.do(t, "GET", path, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
	}
	return checkStream(t, string(data))
}

func checkStream(t *testing.T, stream string) []sseEvent {
	t.Helper()
	events, _ := parseSSE(t, stream)
	if len(events) == 0 {
		t.Fatalf("empty progress stream %q", stream)
	}
	for i, e := range events {
		if e.id != fmt.Sprint(i+1) || i > 0 && e.data.Progress < events[i-1].data.Progress ||
			e.data.final() != (i == len(events)-1) {
			t.Fatalf("event %d of the stream is out of order, not final or final too early:\n%s", i+1, stream)
		}
	}
	if last := events[len(events)-1]; last.data.Progress != 100 {
		t.Errorf("final event %+v: want progress 100", last)
	}
	return events
}

// podOf returns the pod a status's state names, from the API server.
func (e *e2eEnv) podOf(t *testing.T, st serverStatus) *corev1.Pod {
	t.Helper()
	name, ns := stateField(t, st, "pod_name"), stateField(t, st, "namespace")
	if ns != e.ns {
		t.Fatalf("the server's pod is in namespace %q, want the configured %q", ns, e.ns)
	}
	pod, err := e.c.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the server's pod: %v", err)
	}
	return pod
}

func stateField(t *testing.T, st serverStatus, key string) string {
	t.Helper()
	m, _ := st.State.(map[string]any)
	v, _ := m[key].(string)
	if v == "" {
		t.Fatalf("status state %v has no %s", st.State, key)
	}
	return v
}

// podLog records every pod of a namespace the API server reports, from
// before the test acts: which pods existed, and which container exit
// codes they reported. Its markers (see caughtUp) are not recorded.
type podLog struct {
	mu        sync.Mutex // guards uids, exitCodes and markers
	uids      []types.UID
	exitCodes []int32
	markers   map[string]bool // marker pod names: reported yet?
}

func (e *e2eEnv) watchPods(t *testing.T) *podLog {
	t.Helper()
	w, err := e.c.Client.CoreV1().Pods(e.ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := &podLog{}
	done := make(chan struct{})
	go func() { // owned by the test: its cleanup stops the watch and waits
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			l.mu.Lock()
			if _, ok := l.markers[pod.Name]; ok {
				l.markers[pod.Name] = true
				l.mu.Unlock()
				continue
			}
			if !slices.Contains(l.uids, pod.UID) {
				l.uids = append(l.uids, pod.UID)
			}
			for _, cs := range pod.Status.ContainerStatuses {
				if term := cs.State.Terminated; term != nil && !slices.Contains(l.exitCodes, term.ExitCode) {
					l.exitCodes = append(l.exitCodes, term.ExitCode)
				}
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return l
}

// caughtUp creates a marker pod in the namespace and waits until the
// watch has reported it: every pod created before it has been recorded
// by then, as the watch reports changes in order. The marker is deleted
// again and never recorded.
func (l *podLog) caughtUp(t *testing.T, e *e2eEnv) {
	t.Helper()
	name := fmt.Sprintf("e2e-marker-%d", time.Now().UnixNano())
	l.mu.Lock()
	if l.markers == nil {
		l.markers = map[string]bool{}
	}
	l.markers[name] = false
	l.mu.Unlock()
	pods := e.c.Client.CoreV1().Pods(e.ns)
	marker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: "spawnkit-no-kubelet", Containers: []corev1.Container{{Name: "marker", Image: "marker"}}},
	}
	if _, err := pods.Create(t.Context(), marker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, e2eTimeout, "the watch to report marker pod "+name, testutil.True(func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.markers[name]
	}))
	if err := pods.Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
}

func (l *podLog) seen() (uids []types.UID, exitCodes []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.uids), slices.Clone(l.exitCodes)
}

func TestE2EEmptyAndUnknown(t *testing.T) {
	e := newE2E(t)
	s := e.startService(t)
	resp, data := s.do(t, "GET", "/v1/servers", "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(data)) != "[]" {
		t.Errorf("GET /v1/servers with no server: %d %s, want 200 []", resp.StatusCode, data)
	}
	for _, path := range []string{"/v1/users/nobody/server/progress", "/v1/users/nobody/servers/lab/progress", "/v1/users/nobody/server"} {
		resp, data := s.do(t, "GET", path, "")
		wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
	}
}

// TestE2EStartIsIdempotent: a POST starts a server (202); POSTs while it
// starts or runs answer 200 with its status and never restart its pod;
// the start's progress ends ready; the status is running with the URL.
func TestE2EStartIsIdempotent(t *testing.T) {
	e := newE2E(t)
	pods := e.watchPods(t)
	s := e.startService(t)
	const path = "/v1/users/alice/servers/lab"

	st := s.status(t, "POST", path, `{"user_id": 7}`, http.StatusAccepted)
	if st.Phase != "starting" || st.User != "alice" || st.Server != "lab" || st.ExitCode != nil {
		t.Errorf("first POST: %+v, want alice/lab starting with exit_code null", st)
	}
	st = s.status(t, "POST", path, "{}", http.StatusOK)
	if st.Phase != "starting" && st.Phase != "running" {
		t.Errorf("second POST: phase %q, want starting or running", st.Phase)
	}

	events := s.progress(t, path+"/progress")
	last := events[len(events)-1]
	if last.event != "ready" || !last.data.Ready || !strings.HasPrefix(last.data.URL, "http://") {
		t.Fatalf("the start's progress ended with %+v, want event ready with a URL", last)
	}
	st = s.status(t, "GET", path, "", http.StatusOK)
	if st.Phase != "running" || !st.Ready || st.URL != last.data.URL || st.ExitCode != nil || st.ReadyAt == nil {
		t.Errorf("GET after ready: %+v, want running, ready, url %s, exit_code null", st, last.data.URL)
	}
	pod := e.podOf(t, st)
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil || !strings.Contains(st.URL, pod.Status.PodIP) {
		t.Errorf("pod %s: phase %s, IP %s, deleting %v; want Running at the URL's IP %s", pod.Name, pod.Status.Phase, pod.Status.PodIP, pod.DeletionTimestamp, st.URL)
	}

	st = s.status(t, "POST", path, `{"user_options": {"profile": "never-ready"}}`, http.StatusOK)
	if st.Phase != "running" || st.URL != last.data.URL {
		t.Errorf("POST while running: %+v, want running at %s", st, last.data.URL)
	}
	// Had anything restarted the pod, a second one would appear within
	// this second. A marker pod would show only what was made before it,
	// and a restart the Manager made later, on its own, has no signal.
	time.Sleep(time.Second)
	if again := e.podOf(t, st); again.UID != pod.UID || again.DeletionTimestamp != nil {
		t.Errorf("the pod was replaced or is being deleted: UID %s then %s", pod.UID, again.UID)
	}
	if uids, _ := pods.seen(); len(uids) != 1 {
		t.Errorf("the namespace saw pods %v, want only the first start's", uids)
	}
	resp, data := s.do(t, "GET", "/v1/servers", "")
	var list []serverStatus
	if err := json.Unmarshal(data, &list); err != nil || resp.StatusCode != http.StatusOK || len(list) != 1 || list[0].Phase != "running" {
		t.Errorf("GET /v1/servers: %d %s (%v), want the one running server", resp.StatusCode, data, err)
	}
}

// TestE2EStopCancelsStart: DELETE of a server whose pod never becomes
// ready answers quickly, the pod is gone, and the start's progress ends
// failed with reason Cancelled.
func TestE2EStopCancelsStart(t *testing.T) {
	e := newE2E(t)
	s := e.startService(t)
	const path = "/v1/users/bob/server"

	st := s.status(t, "POST", path, `{"user_options": {"profile": "never-ready"}}`, http.StatusAccepted)
	name := stateField(t, st, "pod_name")
	testutil.EventuallyEvery(t, 100*time.Millisecond, e2eTimeout, "the pod running, not ready", func() error {
		pod, err := e.c.Client.CoreV1().Pods(e.ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		return nil
	})
	if st := s.status(t, "GET", path, "", http.StatusOK); st.Phase != "starting" || st.ExitCode != nil {
		t.Errorf("GET of the never-ready server: %+v, want starting with exit_code null", st)
	}

	// Follow the start's progress from before the DELETE: once the
	// headers are in, the stream is the start's.
	ctx, cancel := context.WithTimeout(t.Context(), e2eTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+path+"/progress", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	streamed := make(chan exchange, 1)
	go func() { streamed <- exchange{req: req, resp: resp}.read() }()

	began := time.Now()
	st = s.status(t, "DELETE", path, "", http.StatusOK)
	took := time.Since(began)
	t.Logf("DELETE of the starting server took %s", took)
	if took > 5*time.Second {
		t.Errorf("DELETE of a starting server took %s, want under 5s", took)
	}
	if st.Phase != "stopped" || st.Ready || st.URL != "" {
		t.Errorf("DELETE answered %+v, want stopped", st)
	}
	if _, err := e.c.Client.CoreV1().Pods(e.ns).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after DELETE, getting pod %s: %v, want NotFound", name, err)
	}

	var x exchange
	select {
	case x = <-streamed:
	case <-ctx.Done():
		t.Fatal("the start's progress stream did not end after the DELETE")
	}
	_, data := x.check(t)
	events := checkStream(t, string(data))
	if last := events[len(events)-1]; last.event != "failed" || !last.data.Failed || last.data.Reason != "Cancelled" {
		t.Errorf("the start's progress ended with %+v, want event failed with reason Cancelled", last)
	}
	if st := s.status(t, "GET", path, "", http.StatusOK); st.Phase != "stopped" {
		t.Errorf("GET after DELETE: %+v, want stopped", st)
	}
	// The latest operation is now the stop.
	events = s.progress(t, path+"/progress")
	if last := events[len(events)-1]; last.event != "stopped" {
		t.Errorf("progress after the DELETE ended with %+v, want the stop's event stopped", last)
	}
}

// TestE2EExitCode: a server whose container exits with 3 reports
// exit_code 3.
func TestE2EExitCode(t *testing.T) {
	e := newE2E(t)
	pods := e.watchPods(t)
	s := e.startService(t)
	const path = "/v1/users/carol/servers/exits"

	s.status(t, "POST", path, `{"user_options": {"profile": "exit3"}}`, http.StatusAccepted)
	var st serverStatus
	testutil.EventuallyEvery(t, 100*time.Millisecond, e2eTimeout, "an exit code in the status", func() error {
		st = s.status(t, "GET", path, "", http.StatusOK)
		if st.ExitCode == nil {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if *st.ExitCode != 3 || st.Phase != "failed" || st.Ready {
		t.Errorf("status %+v (exit_code %d), want failed with exit_code 3", st, *st.ExitCode)
	}
	if _, codes := pods.seen(); !slices.Equal(codes, []int32{3}) {
		t.Errorf("the pod's containers terminated with %v, want [3]", codes)
	}
	// delete_stopped_pods is on by default: Poll deletes the exited pod.
	name := stateField(t, st, "pod_name")
	testutil.EventuallyEvery(t, 100*time.Millisecond, e2eTimeout, "the exited pod deleted", func() error {
		pod, err := e.c.Client.CoreV1().Pods(e.ns).Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%v %v", pod.Status.Phase, err)
	})
	if st := s.status(t, "GET", path, "", http.StatusOK); st.ExitCode == nil || *st.ExitCode != 3 {
		t.Errorf("status once the pod is gone: %+v, want exit_code still 3", st)
	}
}

// TestE2EBadUserOptions: an unknown profile is refused before anything
// is created.
func TestE2EBadUserOptions(t *testing.T) {
	e := newE2E(t)
	pods := e.watchPods(t)
	s := e.startService(t)
	const path = "/v1/users/dave/server"

	resp, data := s.do(t, "POST", path, `{"user_options": {"profile": "nope"}}`)
	wantError(t, resp, data, http.StatusBadRequest, reasonInvalidUserOptions)
	// No start was accepted, so none runs that could still make a pod;
	// and every pod made before the marker has been reported.
	resp, data = s.do(t, "GET", path, "")
	wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
	pods.caughtUp(t, e)
	list, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if uids, _ := pods.seen(); len(list.Items) != 0 || len(uids) != 0 {
		t.Errorf("a refused start left %d pods (%d seen)", len(list.Items), len(uids))
	}
}

// TestE2ERestart: a new service instance (a new registry and Manager)
// finds the running server of the one before, at the same URL, without
// touching its pod.
func TestE2ERestart(t *testing.T) {
	e := newE2E(t)
	pods := e.watchPods(t)
	first := e.startService(t)
	const path = "/v1/users/erin/servers/lab"

	first.status(t, "POST", path, "{}", http.StatusAccepted)
	events := first.progress(t, path+"/progress")
	ready := events[len(events)-1]
	if !ready.data.Ready {
		t.Fatalf("the start ended with %+v, want ready", ready)
	}
	st := first.status(t, "GET", path, "", http.StatusOK)
	pod := e.podOf(t, st)
	if err := first.stop(); err != nil {
		t.Fatalf("stopping the first service: %v", err)
	}
	if again := e.podOf(t, st); again.UID != pod.UID || again.DeletionTimestamp != nil {
		t.Fatalf("stopping the service touched the pod: UID %s then %s, deleting %v", pod.UID, again.UID, again.DeletionTimestamp)
	}

	second := e.startService(t)
	st = second.status(t, "GET", path, "", http.StatusOK)
	if st.Phase != "running" || !st.Ready || st.URL != ready.data.URL || st.ExitCode != nil {
		t.Errorf("the new service reports %+v, want running at %s with exit_code null", st, ready.data.URL)
	}
	st = second.status(t, "POST", path, "{}", http.StatusOK)
	if st.Phase != "running" || st.URL != ready.data.URL {
		t.Errorf("POST to the new service: %+v, want running at %s", st, ready.data.URL)
	}
	resp, data := second.do(t, "GET", "/v1/servers", "")
	var list []serverStatus
	if err := json.Unmarshal(data, &list); err != nil || resp.StatusCode != http.StatusOK || len(list) != 1 || list[0].URL != ready.data.URL {
		t.Errorf("GET /v1/servers from the new service: %d %s (%v), want the running server", resp.StatusCode, data, err)
	}
	if uids, _ := pods.seen(); len(uids) != 1 || uids[0] != pod.UID {
		t.Errorf("the namespace saw pods %v, want only %s", uids, pod.UID)
	}
	// The new service owns the server: it stops it.
	if st := second.status(t, "DELETE", path, "", http.StatusOK); st.Phase != "stopped" {
		t.Errorf("DELETE through the new service: %+v, want stopped", st)
	}
	if _, err := e.c.Client.CoreV1().Pods(e.ns).Get(t.Context(), pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after DELETE through the new service, getting pod %s: %v, want NotFound", pod.Name, err)
	}
}

// TestE2EBadUserOptionsLeaveNoServer: a refused start leaves no server
// behind either (manager.Manager.Spawn: "Bad user options fail here,
// before anything is created"): the server stays unknown (404) and the
// list empty.
func TestE2EBadUserOptionsLeaveNoServer(t *testing.T) {
	e := newE2E(t)
	s := e.startService(t)
	const path = "/v1/users/dave/server"

	resp, data := s.do(t, "POST", path, `{"user_options": {"profile": "nope"}}`)
	wantError(t, resp, data, http.StatusBadRequest, reasonInvalidUserOptions)
	resp, data = s.do(t, "GET", path, "")
	wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
	resp, data = s.do(t, "GET", "/v1/servers", "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(data)) != "[]" {
		t.Errorf("GET /v1/servers after a refused start: %d %s, want 200 []", resp.StatusCode, data)
	}
}

// serveForTest runs m and h on ln until ctx ends, as cmd/spawnkit-service
// does: request contexts derive from ctx, so open progress streams end
// with it.
func serveForTest(ctx context.Context, ln net.Listener, m *manager.Manager, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.Start(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	})
	return g.Wait()
}

// TestE2EBoundedInput: input beyond spawnkit's bounds, or that would make
// the pod's final annotations (the state record holds every user option)
// invalid, is a 400 InvalidUserOptions naming the bound, before anything
// is created; the attack suite's 30,000 user options (379 KB) was a 202
// whose start then failed at the pod's create.
func TestE2EBoundedInput(t *testing.T) {
	e := newE2E(t)
	pods := e.watchPods(t)
	s := e.startService(t)
	options := func(n, size int) string {
		var b strings.Builder
		b.WriteString(`{"user_options": {`)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"o%d": %q`, i, strings.Repeat("v", size))
		}
		b.WriteString(`}}`)
		return b.String()
	}
	env := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"env": {`)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"V%d": "x"`, i)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	for _, c := range []struct {
		name, body, limit string
	}{
		{"30,000 user options", options(30000, 1), "MaxUserOptions"},
		{"one user option of 5,000 bytes", options(1, 5000), "MaxUserOptionValueBytes"},
		{"600 environment variables", env(600), "MaxEnv"},
		{"64 options of 4,000 bytes: the state record", options(60, 4000), "MaxStateBytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, data := s.do(t, "POST", "/v1/users/bounded/server", c.body)
			wantError(t, resp, data, http.StatusBadRequest, reasonInvalidUserOptions)
			if !strings.Contains(string(data), c.limit) {
				t.Errorf("the error %s does not name %s", data, c.limit)
			}
		})
	}
	// No start was accepted, so none runs that could still make a pod;
	// and every pod made before the marker has been reported.
	resp, data := s.do(t, "GET", "/v1/users/bounded/server", "")
	wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
	pods.caughtUp(t, e)
	if uids, _ := pods.seen(); len(uids) != 0 {
		t.Errorf("refused starts left %d pods", len(uids))
	}
	// Within the bounds it starts.
	s.status(t, "POST", "/v1/users/bounded/server", options(8, 100), http.StatusAccepted)
}
