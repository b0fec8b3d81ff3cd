package service

// The binary's traces, read back from a real Jaeger: every API request
// sends a W3C traceparent, and the spans of the start or stop it began
// must be that trace's, under that parent, in the order the server's life
// took, failed where it failed, and free of secrets. One process exports
// over OTLP/gRPC, another (with -trace-hash-names) over OTLP/HTTP, so
// both protocols the OTEL_* environment selects are proven.

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// traceConfig is the configuration of the traced processes (%[1]s: the
// namespace): a claim per server (so that a failed start shows it is
// kept), the hub's token and a variable of the test's own in the
// environment Secret, the first failed pull fatal (by default only the
// second is), and a profile per case.
//
// The default and pull-error profiles' pods take a second with their IP
// before their containers start or their pull fails: with none the
// simulated kubelet can report the containers running (or waiting with
// ErrImagePull) before its Pulling event reaches the service, an order
// no real kubelet produces (it pulls first), and the test would depend
// on how loaded the machine is.
const traceConfig = `namespace: %[1]s
image: quay.io/jupyter/base-notebook:2024-01-01
start_timeout: 60
unschedulable_timeout: 3
storage_pvc_ensure: true
storage_capacity: 1Gi
secret_env: [JUPYTERHUB_API_TOKEN, JPY_API_TOKEN, TRACE_TEST_SECRET]
fatal_reasons: [InvalidImageName, ErrImageNeverPull, CreateContainerConfigError, CrashLoopBackOff, ErrImagePull]
profile_list:
- display_name: Default
  slug: default
  default: true
  kubespawner_override:
    extra_annotations: {testcluster.spawnkit.dev/ready-after: 1s}
- display_name: Image pull error
  slug: pull-error
  kubespawner_override:
    extra_annotations: {testcluster.spawnkit.dev/behavior: image-pull-error, testcluster.spawnkit.dev/ready-after: 1s}
- display_name: No node matches
  slug: unschedulable
  kubespawner_override:
    node_selector: {trace-test.spawnkit.dev/pool: no-such-pool}
- display_name: Slow
  slug: slow
  kubespawner_override:
    extra_annotations: {testcluster.spawnkit.dev/ready-after: 30s}
`

// traceWait bounds the wait for a trace to be complete in Jaeger (the
// batch processor exports every 100 ms; a race build on two cores is
// slow).
const traceWait = 30 * time.Second

// clockSlack is how far a child span may seem to stick out of its
// parent. Jaeger's JSON has microseconds, start and duration each
// truncated (2 µs at most); and the SDK ends a span at its start plus the
// monotonic time elapsed, while a phase span's times are wall-clock
// readings: a clock NTP slews (up to 500 ppm) moves them apart by up to
// half a millisecond per second of the operation.
const clockSlack = 5 * time.Millisecond

// traced is one traced process with what its cases share.
type traced struct {
	j     *testutil.Jaeger
	s     *binService
	e     *binEnv
	token string // the service's API token
}

// TestTrace starts a Jaeger and two processes exporting to it, and runs
// each case as a parallel subtest on its own server.
func TestTrace(t *testing.T) {
	c := testcluster.Require(t, cluster)
	j := testutil.StartJaeger(t)
	grpc := startTraced(t, c, j, "grpc")
	hashed := startTraced(t, c, j, "http/protobuf", "-trace-hash-names")
	grpc.s.waitReady(t)
	hashed.s.waitReady(t)

	t.Run("Success", func(t *testing.T) { t.Parallel(); grpc.success(t) })
	t.Run("ImagePullError", func(t *testing.T) { t.Parallel(); grpc.pullError(t) })
	t.Run("Unschedulable", func(t *testing.T) { t.Parallel(); grpc.unschedulable(t) })
	t.Run("StopDuringStart", func(t *testing.T) { t.Parallel(); grpc.stopDuringStart(t) })
	t.Run("HashedNames", func(t *testing.T) { t.Parallel(); hashed.hashedNames(t) })
}

func startTraced(t *testing.T, c *testcluster.Cluster, j *testutil.Jaeger, protocol string, flags ...string) *traced {
	t.Helper()
	token := "service-" + randomHex(t)
	e := newBinEnv(t, c, token)
	writeTestFile(t, e.config, fmt.Sprintf(traceConfig, e.ns))
	args, listen, probes := e.args(t)
	name := "spawnkit-service " + protocol
	p := startProc(t, name, j.Env(protocol), append(args, flags...)...)
	return &traced{j: j, s: &binService{proc: p, listen: listen, probes: probes}, e: e, token: token}
}

// success: a start's trace is the hub's, its spans nest and follow one
// another as the server's life did, and carry what they promise; the
// progress and the log name the trace; the stop has its own trace.
func (tr *traced) success(t *testing.T) {
	const user = "trace-ok"
	path := serverPath(user)
	start := tr.start(t, path, "default")
	st := tr.waitPhase(t, path, "running")
	if !st.Ready {
		t.Fatalf("running but not ready: %+v", st)
	}
	// The env Secret holds what the start sent: every value of every
	// Secret of the namespace is something no span may carry.
	secret, err := tr.e.c.Client.CoreV1().Secrets(tr.e.ns).Get(t.Context(), st.State.PodName+".env", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the server's env Secret: %v", err)
	}
	if string(secret.Data["JUPYTERHUB_API_TOKEN"]) != start.hubToken || string(secret.Data["TRACE_TEST_SECRET"]) != start.extra {
		t.Fatalf("the env Secret %s does not hold the start's secret variables: keys %v", secret.Name, slices.Sorted(maps.Keys(secret.Data)))
	}
	forbidden := append(tr.secrets(start), tr.namespaceSecrets(t)...)

	trace := tr.waitStarted(t, start.tp)
	if os.Getenv("SPAWNKIT_WRITE_TRACE") == "1" {
		tr.writeTrace(t, start.tp.traceID, filepath.Join("..", "..", "..", "docs", "testdata", "trace-start.json"))
	}
	spawn := only(t, trace, trace.ByName("spawnkit.spawn"), "spawnkit.spawn")
	if spawn.Parent() != start.tp.spanID {
		t.Errorf("spawnkit.spawn's parent is %q, want the traceparent's span %s", spawn.Parent(), start.tp.spanID)
	}
	op := onlyChild(t, trace, spawn, "spawnkit.start")
	steps := trace.Children(op)
	t.Logf("spawnkit.start's children: %s", names(steps))
	want := []string{"plan", "create claim", "create pod", "create secret", "scheduling", "image_pull", "container_start", "readiness"}
	got := map[string]*testutil.Span{}
	for _, s := range steps {
		if got[s.OperationName] != nil {
			t.Errorf("two %s spans under spawnkit.start", s.OperationName)
		}
		got[s.OperationName] = s
	}
	for _, name := range want {
		if got[name] == nil {
			t.Fatalf("no %s span under spawnkit.start; its children: %s", name, names(steps))
		}
	}
	if len(steps) != len(want) {
		t.Errorf("spawnkit.start has %d children (%s), want %d: %v", len(steps), names(steps), len(want), want)
	}
	// The calls follow one another; the phases the wait saw start where
	// the pod's create returned and touch one another.
	before(t, got["plan"], got["create claim"], false)
	before(t, got["create claim"], got["create pod"], false)
	after(t, got["create secret"], got["create pod"])
	for _, pair := range [][2]string{{"create pod", "scheduling"}, {"scheduling", "image_pull"}, {"image_pull", "container_start"}, {"container_start", "readiness"}} {
		before(t, got[pair[0]], got[pair[1]], true)
	}
	after(t, got["scheduling"], got["create pod"])
	within(t, trace, spawn)
	noErrors(t, trace)
	for _, key := range []string{"k8s.pod.name", "k8s.namespace.name", "spawnkit.user", "spawnkit.server"} {
		if _, ok := op.Tag(key); !ok {
			t.Errorf("spawnkit.start has no %s", key)
		}
	}
	wantTag(t, op, "k8s.pod.name", st.State.PodName)
	wantTag(t, op, "k8s.namespace.name", tr.e.ns)
	wantTag(t, op, "spawnkit.user", user)
	wantTag(t, spawn, "spawnkit.user", user)
	node, _ := got["scheduling"].Tag("k8s.node.name")
	if n, _ := node.(string); n == "" {
		t.Errorf("scheduling has no k8s.node.name: %v", got["scheduling"].Tags)
	} else {
		wantTag(t, op, "k8s.node.name", n)
	}
	wantTag(t, got["image_pull"], "container.image.name", "quay.io/jupyter/base-notebook:2024-01-01")

	// The progress and the log name the hub's trace.
	events := tr.progress(t, path)
	if len(events) == 0 {
		t.Fatal("the progress stream has no event")
	}
	for i, ev := range events {
		if ev["trace_id"] != start.tp.traceID {
			t.Errorf("progress event %d has trace_id %v, want %s: %v", i+1, ev["trace_id"], start.tp.traceID, ev)
		}
	}
	tr.wantLogged(t, start.tp.traceID, `"method"="POST"`)

	// The stop: a trace of its own, under its request's parent.
	stop := newTraceParent(t)
	if r := tr.do(t, http.MethodDelete, path, stop, ""); r.code != http.StatusOK {
		t.Fatalf("the stop: %d %s", r.code, r.body)
	}
	stopTrace := tr.waitStopped(t, stop)
	tr.checkStop(t, stopTrace, stop, true)
	tr.wantLogged(t, stop.traceID, `"method"="DELETE"`)
	for _, x := range []*testutil.Trace{trace, stopTrace} {
		noSecrets(t, x, forbidden)
	}
}

// pullError: a start whose image cannot be pulled fails in its
// image_pull phase, and says why on the operations' spans; its pod is
// deleted and its claim kept.
func (tr *traced) pullError(t *testing.T) {
	const user = "trace-pull"
	path := serverPath(user)
	start := tr.start(t, path, "pull-error")
	st := tr.waitPhase(t, path, "failed")
	if st.Reason != "ErrImagePull" {
		t.Errorf("status reason %q (%s), want ErrImagePull", st.Reason, st.Message)
	}
	trace := tr.waitStarted(t, start.tp)
	spawn := only(t, trace, trace.ByName("spawnkit.spawn"), "spawnkit.spawn")
	op := onlyChild(t, trace, spawn, "spawnkit.start")
	t.Logf("spawnkit.start's children: %s", names(trace.Children(op)))
	for _, s := range []*testutil.Span{spawn, op} {
		wantError(t, s)
		wantTag(t, s, "spawnkit.reason", "ErrImagePull")
	}
	pull := onlyChild(t, trace, op, "image_pull")
	wantError(t, pull)
	for _, s := range trace.Spans {
		if s != pull && s != op && s != spawn && spanStatus(s) == "ERROR" {
			t.Errorf("%s has status ERROR too: only the phase that failed and the operations should", s.OperationName)
		}
	}
	if r := trace.ByName("readiness"); len(r) > 0 {
		t.Errorf("a failed pull has a readiness span: %v", r[0].Tags)
	}
	within(t, trace, spawn)
	noSecrets(t, trace, tr.secrets(start))
	tr.podGoneClaimKept(t, st)
}

// unschedulable: a pod no node takes ends its start after
// unschedulable_timeout, in the scheduling phase, with the scheduler's
// message.
func (tr *traced) unschedulable(t *testing.T) {
	const user = "trace-unsched"
	path := serverPath(user)
	start := tr.start(t, path, "unschedulable")
	st := tr.waitPhase(t, path, "failed")
	if st.Reason != "Unschedulable" {
		t.Errorf("status reason %q (%s), want Unschedulable", st.Reason, st.Message)
	}
	// The kube-scheduler's own words for a node_selector no node has.
	const scheduler = "didn't match Pod's node affinity/selector"
	if !strings.Contains(st.Message, scheduler) {
		t.Errorf("status message %q does not quote the scheduler (%q)", st.Message, scheduler)
	}
	trace := tr.waitStarted(t, start.tp)
	spawn := only(t, trace, trace.ByName("spawnkit.spawn"), "spawnkit.spawn")
	op := onlyChild(t, trace, spawn, "spawnkit.start")
	t.Logf("spawnkit.start's children: %s", names(trace.Children(op)))
	for _, s := range []*testutil.Span{spawn, op} {
		wantError(t, s)
		wantTag(t, s, "spawnkit.reason", "Unschedulable")
	}
	sched := onlyChild(t, trace, op, "scheduling")
	wantError(t, sched)
	if d, _ := sched.Tag("otel.status_description"); !strings.Contains(fmt.Sprint(d), scheduler) {
		t.Errorf("scheduling's status %q does not quote the scheduler", d)
	}
	for _, name := range []string{"image_pull", "container_start", "readiness"} {
		if len(trace.ByName(name)) > 0 {
			t.Errorf("an unscheduled pod has a %s span", name)
		}
	}
	within(t, trace, spawn)
	noSecrets(t, trace, tr.secrets(start))
	tr.podGoneClaimKept(t, st)
}

// stopDuringStart: a stop while the pod boots ends the start (Cancelled),
// whose cleanup deletes the pod, and each request has its own trace.
func (tr *traced) stopDuringStart(t *testing.T) {
	const user = "trace-cancel"
	path := serverPath(user)
	start := tr.start(t, path, "slow")
	var pod string
	testutil.EventuallyEvery(t, poll, binTimeout, user+"'s pod to exist", func() error {
		st := tr.status(t, path)
		if st.State.PodName == "" {
			return pending(false, fmt.Sprintf("%+v", st))
		}
		_, err := tr.e.c.Client.CoreV1().Pods(tr.e.ns).Get(t.Context(), st.State.PodName, metav1.GetOptions{})
		pod = st.State.PodName
		return err
	})
	stop := newTraceParent(t)
	if r := tr.do(t, http.MethodDelete, path, stop, ""); r.code != http.StatusOK {
		t.Fatalf("the stop: %d %s", r.code, r.body)
	}
	if st := tr.status(t, path); st.Phase != "stopped" {
		t.Errorf("after the stop: phase %q (%s %s), want stopped", st.Phase, st.Reason, st.Message)
	}

	trace := tr.waitStarted(t, start.tp)
	spawn := only(t, trace, trace.ByName("spawnkit.spawn"), "spawnkit.spawn")
	if spawn.Parent() != start.tp.spanID {
		t.Errorf("spawnkit.spawn's parent is %q, want the start's traceparent span %s", spawn.Parent(), start.tp.spanID)
	}
	op := onlyChild(t, trace, spawn, "spawnkit.start")
	t.Logf("spawnkit.start's children: %s", names(trace.Children(op)))
	for _, s := range []*testutil.Span{spawn, op} {
		wantError(t, s)
		wantTag(t, s, "spawnkit.reason", "Cancelled")
	}
	if len(trace.ByName("readiness")) > 0 {
		t.Error("a cancelled start has a readiness span")
	}
	if s := trace.ByName("spawnkit.stop"); len(s) > 0 {
		t.Errorf("the start's trace has the stop's span: %v", s[0].Tags)
	}
	within(t, trace, spawn)

	stopTrace := tr.waitStopped(t, stop)
	if stopTrace.TraceID == trace.TraceID {
		t.Errorf("the start and the stop share trace %s", trace.TraceID)
	}
	// The stop waits for the start to end, and the start's cleanup
	// deletes the pod it made: the deletion is traced once, there.
	tr.checkStop(t, stopTrace, stop, false)
	deletion(t, trace, op)
	if d := stopTrace.ByName("delete"); len(d) > 0 {
		t.Errorf("the pod's deletion is traced twice: the stop has a delete too (%v)", d[0].Tags)
	}
	for _, x := range []*testutil.Trace{trace, stopTrace} {
		noSecrets(t, x, tr.secrets(start))
	}
	if gone, saw := podGone(t, tr.e.ns, pod); !gone {
		t.Errorf("after the stop: %s", saw)
	}
}

// hashedNames: with -trace-hash-names no attribute carries the user's
// name; the names are 16 hex digits (and this process exports over
// OTLP/HTTP).
func (tr *traced) hashedNames(t *testing.T) {
	const user, server = "trace-hash", "lab"
	path := "/v1/users/" + user + "/servers/" + server
	start := tr.start(t, path, "default")
	st := tr.waitPhase(t, path, "running")
	trace := tr.waitStarted(t, start.tp)
	spawn := only(t, trace, trace.ByName("spawnkit.spawn"), "spawnkit.spawn")
	if spawn.Parent() != start.tp.spanID {
		t.Errorf("spawnkit.spawn's parent is %q, want the traceparent's span %s", spawn.Parent(), start.tp.spanID)
	}
	op := onlyChild(t, trace, spawn, "spawnkit.start")
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	for _, c := range []struct {
		span *testutil.Span
		key  string
	}{{spawn, "spawnkit.user"}, {spawn, "spawnkit.server"}, {op, "spawnkit.user"}, {op, "spawnkit.server"}, {op, "k8s.pod.name"}} {
		v, ok := c.span.Tag(c.key)
		if s, _ := v.(string); !ok || !hex16.MatchString(s) {
			t.Errorf("%s's %s is %v, want 16 hex digits", c.span.OperationName, c.key, v)
		}
	}
	noErrors(t, trace)
	// Not the names, nor anything made from them, anywhere.
	noSecrets(t, trace, append(tr.secrets(start), user, st.State.PodName))
}

// startRequest is what one start sent.
type startRequest struct {
	tp              traceParent
	hubToken, extra string // the env's secret values
}

// start begins a server with profile, a traceparent and secret values in
// its env.
func (tr *traced) start(t *testing.T, path, profile string) startRequest {
	t.Helper()
	req := startRequest{tp: newTraceParent(t), hubToken: "hub-" + randomHex(t), extra: "secret-" + randomHex(t)}
	body, err := json.Marshal(map[string]any{
		"user_options": map[string]string{"profile": profile},
		"env":          map[string]string{"JUPYTERHUB_API_TOKEN": req.hubToken, "TRACE_TEST_SECRET": req.extra},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := tr.do(t, http.MethodPost, path, req.tp, string(body)); r.code != http.StatusAccepted {
		t.Fatalf("start %s: %d %s", path, r.code, r.body)
	}
	return req
}

// secrets are the strings no span of req's trace may hold.
func (tr *traced) secrets(req startRequest) []string {
	return []string{tr.token, req.hubToken, req.extra}
}

// namespaceSecrets is every value of every Secret in the namespace.
func (tr *traced) namespaceSecrets(t *testing.T) []string {
	t.Helper()
	list, err := tr.e.c.Client.CoreV1().Secrets(tr.e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, v := range s.Data {
			out = append(out, string(v))
		}
	}
	return out
}

// do makes one API request with the traceparent and a JSON body (none
// when "").
func (tr *traced) do(t *testing.T, method, path string, tp traceParent, body string) binReply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+tr.s.listen+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tr.token)
	req.Header.Set("Traceparent", tp.header())
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient(nil).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return binReply{code: resp.StatusCode, header: resp.Header, body: string(data)}
}

// traceStatus is the part of a server's status these tests read.
type traceStatus struct {
	Phase   string `json:"phase"`
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	State   struct {
		PodName   string `json:"pod_name"`
		Namespace string `json:"namespace"`
		PVCName   string `json:"pvc_name"`
	} `json:"state"`
}

func (tr *traced) status(t *testing.T, path string) traceStatus {
	t.Helper()
	r := binDo(t, httpClient(nil), http.MethodGet, "http://"+tr.s.listen+path, tr.token)
	var st traceStatus
	if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &st) != nil {
		t.Fatalf("GET %s: %d %s", path, r.code, r.body)
	}
	return st
}

// waitPhase waits until the server's phase is phase; it fails at once
// on another final phase.
func (tr *traced) waitPhase(t *testing.T, path, phase string) traceStatus {
	t.Helper()
	var st traceStatus
	testutil.EventuallyEvery(t, poll, binTimeout, path+" "+phase, func() error {
		st = tr.status(t, path)
		if st.Phase != phase && (st.Phase == "running" || st.Phase == "failed" || st.Phase == "stopped") {
			t.Fatalf("%s is %s (%s: %s), want %s", path, st.Phase, st.Reason, st.Message, phase)
		}
		return pending(st.Phase == phase, fmt.Sprintf("%+v", st))
	})
	return st
}

// progress reads the server's progress stream to its end and returns
// each event's data.
func (tr *traced) progress(t *testing.T, path string) []map[string]any {
	t.Helper()
	code, body := get(t.Context(), httpClient(nil), "http://"+tr.s.listen+path+"/progress", tr.token)
	if code != http.StatusOK {
		t.Fatalf("GET %s/progress: %d %s", path, code, body)
	}
	var events []map[string]any
	for _, l := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("progress event %q: %v", data, err)
		}
		events = append(events, ev)
	}
	return events
}

// wantLogged fails unless the request line of the request (its method
// given as a funcr pair) and a Manager's phase line carry traceID.
func (tr *traced) wantLogged(t *testing.T, traceID, method string) {
	t.Helper()
	id := `"trace_id"="` + traceID + `"`
	tr.s.waitLines(t, 0, "the request line with "+id, `"msg"="request"`, method, id)
	tr.s.waitLines(t, 0, "a phase line with "+id, `"msg"="phase"`, id)
}

// waitStarted waits for a start's trace to hold its spawnkit.spawn, the
// span that ends last: the batch processor exports spans in the order
// they end, so every span of the start is there with it.
func (tr *traced) waitStarted(t *testing.T, tp traceParent) *testutil.Trace {
	t.Helper()
	trace := tr.j.WaitTrace(t, traceWait, tp.traceID, func(x *testutil.Trace) bool { return len(x.ByName("spawnkit.spawn")) > 0 })
	tr.oneTrace(t, trace, tp)
	return trace
}

// waitStopped waits for a stop's trace to hold its spawnkit.stop (which
// ends last).
func (tr *traced) waitStopped(t *testing.T, tp traceParent) *testutil.Trace {
	t.Helper()
	trace := tr.j.WaitTrace(t, traceWait, tp.traceID, func(x *testutil.Trace) bool { return len(x.ByName("spawnkit.stop")) > 0 })
	tr.oneTrace(t, trace, tp)
	return trace
}

// oneTrace fails unless Jaeger has exactly one trace of tp's id, whose
// spans are all of it, and the spans without a parent in the trace hang
// from tp's span.
func (tr *traced) oneTrace(t *testing.T, trace *testutil.Trace, tp traceParent) {
	t.Helper()
	raw := tr.rawTrace(t, tp.traceID)
	var got struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Data) != 1 {
		t.Errorf("jaeger has %d traces of id %s, want 1", len(got.Data), tp.traceID)
	}
	if trace.TraceID != tp.traceID {
		t.Errorf("trace id %s, want the traceparent's %s", trace.TraceID, tp.traceID)
	}
	ids := map[string]bool{}
	for _, s := range trace.Spans {
		ids[s.SpanID] = true
	}
	for _, s := range trace.Spans {
		if s.TraceID != tp.traceID {
			t.Errorf("%s has trace id %s, want %s", s.OperationName, s.TraceID, tp.traceID)
		}
		if p := s.Parent(); !ids[p] && p != tp.spanID {
			t.Errorf("%s's parent %q is neither in the trace nor the traceparent's span %s", s.OperationName, p, tp.spanID)
		}
	}
}

// rawTrace is Jaeger's answer to GET /api/traces/<id>, as it sent it.
func (tr *traced) rawTrace(t *testing.T, traceID string) []byte {
	t.Helper()
	code, body := get(t.Context(), &http.Client{Timeout: 10 * time.Second}, tr.j.QueryURL()+"/api/traces/"+traceID, "")
	if code != http.StatusOK {
		t.Fatalf("jaeger: GET /api/traces/%s: %d %s", traceID, code, body)
	}
	return []byte(body)
}

// writeTrace saves the trace as Jaeger returns it, indented, its spans
// sorted by start time, for the documentation to show.
func (tr *traced) writeTrace(t *testing.T, traceID, file string) {
	t.Helper()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(tr.rawTrace(t, traceID), &doc); err != nil {
		t.Fatal(err)
	}
	var traces []map[string]json.RawMessage
	if err := json.Unmarshal(doc["data"], &traces); err != nil {
		t.Fatal(err)
	}
	for _, x := range traces {
		var spans []json.RawMessage
		if err := json.Unmarshal(x["spans"], &spans); err != nil {
			t.Fatal(err)
		}
		type key struct {
			StartTime int64  `json:"startTime"`
			Name      string `json:"operationName"`
		}
		keyOf := func(s json.RawMessage) (k key) {
			_ = json.Unmarshal(s, &k)
			return k
		}
		// Phases that touch start on one clock reading: the order of a
		// start's life breaks the tie, not Jaeger's storage order.
		life := []string{"scheduling", "image_pull", "container_start", "readiness", "delete", "terminating", "gone"}
		slices.SortStableFunc(spans, func(a, b json.RawMessage) int {
			ka, kb := keyOf(a), keyOf(b)
			if c := cmp.Compare(ka.StartTime, kb.StartTime); c != 0 {
				return c
			}
			return cmp.Compare(slices.Index(life, ka.Name), slices.Index(life, kb.Name))
		})
		x["spans"] = mustJSON(t, spans)
	}
	doc["data"] = mustJSON(t, traces)
	var out bytes.Buffer
	if err := json.Indent(&out, mustJSON(t, doc), "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote the trace to %s", file)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkStop checks a stop's trace: spawnkit.stop under the request's
// span, nothing failed, and its pod's deletion when want.
func (tr *traced) checkStop(t *testing.T, trace *testutil.Trace, tp traceParent, deletes bool) {
	t.Helper()
	stop := only(t, trace, trace.ByName("spawnkit.stop"), "spawnkit.stop")
	if stop.Parent() != tp.spanID {
		t.Errorf("spawnkit.stop's parent is %q, want the traceparent's span %s", stop.Parent(), tp.spanID)
	}
	t.Logf("spawnkit.stop's children: %s", names(trace.Children(stop)))
	if deletes {
		deletion(t, trace, stop)
	}
	within(t, trace, stop)
	noErrors(t, trace)
}

// deletion checks the pod's deletion under parent: its delete,
// terminating and gone, once each, one after the other.
func deletion(t *testing.T, trace *testutil.Trace, parent *testutil.Span) {
	t.Helper()
	del := onlyChild(t, trace, parent, "delete")
	term := onlyChild(t, trace, parent, "terminating")
	gone := onlyChild(t, trace, parent, "gone")
	if o, _ := del.Tag("spawnkit.object"); !strings.HasPrefix(fmt.Sprint(o), "Pod/") {
		t.Errorf("delete's spawnkit.object is %v, want Pod/<name>", o)
	}
	before(t, del, term, true)
	before(t, term, gone, true)
}

// podGoneClaimKept waits until a failed start's pod is gone, and checks
// that its claim is still there.
func (tr *traced) podGoneClaimKept(t *testing.T, st traceStatus) {
	t.Helper()
	if st.State.PodName == "" || st.State.PVCName == "" {
		t.Fatalf("the status names no pod or claim: %+v", st)
	}
	testutil.EventuallyEvery(t, poll, binTimeout, "pod "+st.State.PodName+" gone", func() error {
		gone, saw := podGone(t, tr.e.ns, st.State.PodName)
		return pending(gone, saw)
	})
	if _, err := tr.e.c.Client.CoreV1().PersistentVolumeClaims(tr.e.ns).Get(t.Context(), st.State.PVCName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Errorf("the failed start deleted its claim %s", st.State.PVCName)
	} else if err != nil {
		t.Error(err)
	}
}

// traceParent is a W3C trace context a test sends.
type traceParent struct{ traceID, spanID string }

func newTraceParent(t *testing.T) traceParent {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return traceParent{traceID: hex.EncodeToString(b[:16]), spanID: hex.EncodeToString(b[16:])}
}

// header is the traceparent header's value, sampled.
func (p traceParent) header() string { return "00-" + p.traceID + "-" + p.spanID + "-01" }

// only fails unless spans holds exactly one span, and returns it.
func only(t *testing.T, trace *testutil.Trace, spans []*testutil.Span, what string) *testutil.Span {
	t.Helper()
	if len(spans) != 1 {
		t.Fatalf("%d %s spans, want 1; the trace: %s", len(spans), what, names(trace.Spans))
	}
	return spans[0]
}

// onlyChild is parent's one child named name.
func onlyChild(t *testing.T, trace *testutil.Trace, parent *testutil.Span, name string) *testutil.Span {
	t.Helper()
	var spans []*testutil.Span
	for _, s := range trace.Children(parent) {
		if s.OperationName == name {
			spans = append(spans, s)
		}
	}
	return only(t, trace, spans, name+" under "+parent.OperationName)
}

func names(spans []*testutil.Span) string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.OperationName
	}
	return strings.Join(out, ", ")
}

// before fails unless a starts before b (or with it, when touch: phases
// one of which begins where the other ends, on one clock reading).
func before(t *testing.T, a, b *testutil.Span, touch bool) {
	t.Helper()
	if a.StartTime > b.StartTime || !touch && a.StartTime == b.StartTime {
		t.Errorf("%s starts at %d µs, %s at %d µs: want %s first", a.OperationName, a.StartTime, b.OperationName, b.StartTime, a.OperationName)
	}
}

// after fails unless b starts once a has ended (within clockSlack: a's
// end is its start plus a monotonic duration).
func after(t *testing.T, b, a *testutil.Span) {
	t.Helper()
	if b.Start().Before(a.End().Add(-clockSlack)) {
		t.Errorf("%s starts at %s, before %s ended at %s", b.OperationName, b.Start().Format(time.StampMicro), a.OperationName, a.End().Format(time.StampMicro))
	}
}

// within fails unless every span under root lies within its parent's
// [start, end], give or take clockSlack.
func within(t *testing.T, trace *testutil.Trace, root *testutil.Span) {
	t.Helper()
	for _, c := range trace.Children(root) {
		if c.Start().Before(root.Start().Add(-clockSlack)) || c.End().After(root.End().Add(clockSlack)) {
			t.Errorf("%s [%s, %s] is not within its parent %s [%s, %s]", c.OperationName,
				c.Start().Format(time.StampMicro), c.End().Format(time.StampMicro),
				root.OperationName, root.Start().Format(time.StampMicro), root.End().Format(time.StampMicro))
		}
		within(t, trace, c)
	}
}

// spanStatus is a span's OTLP status code as Jaeger writes it ("" unset).
func spanStatus(s *testutil.Span) string {
	v, _ := s.Tag("otel.status_code")
	str, _ := v.(string)
	return str
}

func noErrors(t *testing.T, trace *testutil.Trace) {
	t.Helper()
	for _, s := range trace.Spans {
		if spanStatus(s) == "ERROR" {
			d, _ := s.Tag("otel.status_description")
			t.Errorf("%s has status ERROR: %v", s.OperationName, d)
		}
	}
}

func wantError(t *testing.T, s *testutil.Span) {
	t.Helper()
	if spanStatus(s) != "ERROR" {
		t.Errorf("%s has status %q, want ERROR; its tags: %v", s.OperationName, spanStatus(s), s.Tags)
	}
}

func wantTag(t *testing.T, s *testutil.Span, key, want string) {
	t.Helper()
	if v, ok := s.Tag(key); !ok || v != want {
		t.Errorf("%s's %s is %v (set: %v), want %q", s.OperationName, key, v, ok, want)
	}
}

// noSecrets fails if any span's name, tag, event field or process tag
// holds one of secrets.
func noSecrets(t *testing.T, trace *testutil.Trace, secrets []string) {
	t.Helper()
	check := func(where string, kvs []testutil.KeyValue) {
		for _, kv := range kvs {
			v := fmt.Sprint(kv.Value)
			for _, s := range secrets {
				if s != "" && strings.Contains(v, s) {
					t.Errorf("%s: %s = %q holds the secret %q", where, kv.Key, v, s)
				}
			}
		}
	}
	for _, s := range trace.Spans {
		check(s.OperationName+" (name)", []testutil.KeyValue{{Key: "operationName", Value: s.OperationName}})
		check(s.OperationName, s.Tags)
		for i, l := range s.Logs {
			check(s.OperationName+" event "+strconv.Itoa(i), l.Fields)
		}
	}
	for id, p := range trace.Processes {
		check("process "+id, p.Tags)
	}
}
