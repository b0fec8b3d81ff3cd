package reflector

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.APIServer}, &cluster)
}

func newRegistry(t *testing.T, opts Options) *Registry {
	t.Helper()
	c := testcluster.Require(t, cluster)
	if opts.Config == nil && opts.Client == nil {
		opts.Config = c.Config
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Closed as a hub closes its Registry: a lingering event informer
	// stops with it.
	t.Cleanup(r.Close)
	return r
}

func newNamespace(t *testing.T) string {
	t.Helper()
	c := testcluster.Require(t, cluster)
	ns, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "refl-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func createPod(t *testing.T, ns, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	if labels == nil {
		labels = map[string]string{"component": "singleuser-server"}
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "notebook", Image: "busybox",
			Env: []corev1.EnvVar{{Name: "BIG", Value: "x"}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := cluster.Client.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
}

func createEvent(t *testing.T, pod *corev1.Pod, reason string, at time.Time) {
	t.Helper()
	_, err := cluster.Client.CoreV1().Events(pod.Namespace).Create(t.Context(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + "-"},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1",
		},
		Reason: reason, Message: reason + " message", Type: corev1.EventTypeNormal,
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
		Source: corev1.EventSource{Component: "test"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// watchNamespace holds the pod and event informers of ns for the test.
func watchNamespace(t *testing.T, r *Registry, ns string) (*Pods, *Events) {
	t.Helper()
	pods, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pods.Release)
	events, err := r.Events(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(events.Release)
	return pods, events
}

// syncedPods holds r's pod informer of ns until the test ends, once it
// has synced.
func syncedPods(t *testing.T, r *Registry, ns string) *Pods {
	t.Helper()
	pods, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pods.Release)
	if err := pods.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestSharingAndRefcounting(t *testing.T) {
	r := newRegistry(t, Options{})
	ns := newNamespace(t)
	a, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if a.h.e != b.h.e || len(r.Status()) != 1 {
		t.Fatalf("two holders of one key got %d informers", len(r.Status()))
	}
	other, err := r.Pods(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if other.h.e == a.h.e || len(r.Status()) != 2 {
		t.Fatal("a different namespace shared an informer")
	}
	shared := a.h.e
	a.Release()
	a.Release() // harmless
	if _, running := r.Status()[shared.key]; !running {
		t.Fatal("releasing one of two holders stopped the informer")
	}
	b.Release()
	select {
	case <-shared.done:
	default:
		t.Fatal("the informer still runs after its last holder released it")
	}
	if _, running := r.Status()[shared.key]; running {
		t.Fatal("a stopped informer is still listed")
	}
	other.Release()
	if len(r.Status()) != 0 {
		t.Fatalf("%d informers left", len(r.Status()))
	}
}

func TestReadBeforeSyncWaits(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "early", nil)
	r := newRegistry(t, Options{})
	pods, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	// No WaitForSync: Get itself must wait instead of answering "missing".
	got, ok, err := pods.Get(t.Context(), ns, "early")
	if err != nil || !ok || got.Name != "early" {
		t.Fatalf("Get right after start = %v, %v, %v; want the pod created before", got, ok, err)
	}
	// A read bounded by an ended context reports why instead of "missing".
	r2 := newRegistry(t, Options{})
	pods2, err := r2.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods2.Release()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, ok, err := pods2.Get(ctx, ns, "early"); err == nil && !ok {
		t.Fatal("Get with an ended context reported the pod missing")
	}
}

func TestLabelSelectorAndNamespaces(t *testing.T) {
	ns1, ns2 := newNamespace(t), newNamespace(t)
	r := newRegistry(t, Options{})
	all, err := r.Pods(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Release()
	one, err := r.Pods(t.Context(), ns1)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Release()
	createPod(t, ns1, "a", nil)
	createPod(t, ns2, "b", nil)
	createPod(t, ns1, "unlabelled", map[string]string{"component": "hub"})

	testutil.Eventually(t, 20*time.Second, "both pods in the all-namespaces cache", testutil.True(func() bool {
		_, okA, _ := all.Get(t.Context(), ns1, "a")
		_, okB, _ := all.Get(t.Context(), ns2, "b")
		return okA && okB
	}))
	testutil.Eventually(t, 20*time.Second, "pod a in the namespace cache", testutil.True(func() bool {
		_, ok, _ := one.Get(t.Context(), ns1, "a")
		return ok
	}))
	if _, ok, _ := one.Get(t.Context(), ns2, "b"); ok {
		t.Error("a namespace informer cached a pod of another namespace")
	}
	for _, p := range []*Pods{all, one} {
		if _, ok, _ := p.Get(t.Context(), ns1, "unlabelled"); ok {
			t.Error("a pod without the component label was cached")
		}
	}
	list, err := all.List(t.Context(), ns2)
	if err != nil || len(list) != 1 || list[0].Name != "b" {
		t.Errorf("List(%s) = %v, %v; want pod b only", ns2, list, err)
	}
	got, _, _ := one.Get(t.Context(), ns1, "a")
	if got.Name != "a" || got.Namespace != ns1 || got.Labels.Get("component") != "singleuser-server" || len(got.Ports) != 0 {
		t.Errorf("cached pod = %+v; want pod a with its labels and no ports", got)
	}
	byUID, ok, err := one.GetByUID(t.Context(), got.UID)
	if err != nil || !ok || byUID != got {
		t.Errorf("GetByUID = %v, %v, %v", byUID, ok, err)
	}
}

func TestEventsByPodInTimeOrderAndBounded(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{MaxEventsPerPod: 3})
	// The pod informer runs too: it is what drops a deleted pod's events.
	_, events := watchNamespace(t, r, ns)

	a := createPod(t, ns, "pod-a", nil)
	b := createPod(t, ns, "pod-b", nil)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	// Created out of order; five for a (bound 3), one for b.
	for _, reason := range []string{"R3", "R1", "R5", "R2", "R4"} {
		n := int(reason[1] - '0')
		createEvent(t, a, reason, base.Add(time.Duration(n)*time.Minute))
	}
	createEvent(t, b, "OnlyB", base)

	reasonsOf := func(evs []*corev1.Event) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Reason)
		}
		return out
	}
	// Once all five have been handled, the bound leaves the newest three,
	// in time order, whatever order they arrived in.
	var evs []*corev1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, _ = events.ForPod(ctx, ns, "pod-a")
		return slices.Equal(reasonsOf(evs), []string{"R3", "R4", "R5"}), nil
	})
	if err != nil {
		t.Fatalf("events of pod-a = %v, want the newest three in time order [R3 R4 R5]", reasonsOf(evs))
	}
	byUID, err := events.ForUID(t.Context(), a.UID)
	if err != nil || len(byUID) != 3 {
		t.Errorf("ForUID = %d events, %v", len(byUID), err)
	}
	testutil.Eventually(t, 20*time.Second, "b's event", testutil.True(func() bool {
		evs, _ := events.ForPod(t.Context(), ns, "pod-b")
		return len(evs) == 1
	}))
	for _, e := range evs {
		if e.InvolvedObject.Name != "pod-a" {
			t.Errorf("pod-a's list has an event of %s", e.InvolvedObject.Name)
		}
	}

	// When a pod goes, its events go from the cache.
	deletePod(t, ns, "pod-a")
	testutil.Eventually(t, 20*time.Second, "pod-a's events dropped", testutil.True(func() bool {
		evs, _ := events.ForPod(t.Context(), ns, "pod-a")
		return len(evs) == 0
	}))
	if evs, _ := events.ForPod(t.Context(), ns, "pod-b"); len(evs) != 1 {
		t.Errorf("deleting pod-a dropped pod-b's events too: %d left", len(evs))
	}
}

func TestSubscriptionWakesOnPodAndEvent(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	pods, events := watchNamespace(t, r, ns)
	if err := pods.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := events.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}

	sub := r.Subscribe(ns, "watched")
	defer sub.Close()
	other := r.Subscribe(ns, "other")
	defer other.Close()

	woken := func(s *Subscription, what string) {
		t.Helper()
		select {
		case <-s.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake-up after %s", what)
		}
	}
	pod := createPod(t, ns, "watched", nil)
	woken(sub, "the pod was created")
	createEvent(t, pod, "Scheduled", time.Now())
	woken(sub, "an event of the pod")
	deletePod(t, ns, "watched")
	woken(sub, "the pod was deleted")
	select {
	case <-other.C():
		t.Error("a subscription to another pod was woken")
	default:
	}
	sub.Close()
	sub.Close() // harmless
}

func TestMetrics(t *testing.T) {
	ns := newNamespace(t)
	reg := prometheus.NewRegistry()
	r := newRegistry(t, Options{Registerer: reg})
	pods, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	createPod(t, ns, "m1", nil)
	createPod(t, ns, "m2", nil)
	testutil.Eventually(t, 20*time.Second, "two pods cached", testutil.True(func() bool {
		l, _ := pods.List(t.Context(), ns)
		return len(l) == 2
	}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			found[f.GetName()] = v
		}
	}
	if found["spawnkit_reflector_objects"] != 2 || found["spawnkit_reflector_healthy"] != 1 {
		t.Errorf("metrics = %v, want 2 objects and healthy", found)
	}
}

// TestAPIServerRestart stops kube-apiserver (etcd keeps running), changes
// the cluster while it comes back, and checks that the cache converges and
// that health says what happened. It runs last: it takes the API away.
func TestAPIServerRestart(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	createPod(t, ns, "before", nil)
	r := newRegistry(t, Options{})
	pods, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	if err := pods.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !pods.Status().Healthy() {
		t.Fatalf("not healthy before the outage: %+v", pods.Status())
	}

	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	testutil.Eventually(t, 20*time.Second, "unhealthy while the API server is down", testutil.True(func() bool { return !pods.Status().Healthy() }))
	t.Logf("unhealthy %s after the API server stopped; last error: %v", time.Since(stopped).Round(time.Millisecond), pods.Status().LastError)
	// The last state stays readable during the outage.
	if _, ok, err := pods.Get(t.Context(), ns, "before"); !ok || err != nil {
		t.Errorf("cached pod unreadable during the outage: %v, %v", ok, err)
	}

	// Long enough for client-go's own backoff to have grown to its
	// 30 s cap, which untilReachable keeps it from.
	time.Sleep(15 * time.Second)
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	createPod(t, ns, "after", nil)
	deletePod(t, ns, "before")
	testutil.Eventually(t, 20*time.Second, "the cache converged after the restart", testutil.True(func() bool {
		_, hasAfter, _ := pods.Get(t.Context(), ns, "after")
		_, hasBefore, _ := pods.Get(t.Context(), ns, "before")
		return hasAfter && !hasBefore
	}))
	testutil.Eventually(t, 20*time.Second, "healthy again", testutil.True(func() bool { return pods.Status().Healthy() }))
	s := pods.Status()
	if s.WatchErrors == 0 || s.LastError == nil {
		t.Errorf("status after an outage records no errors: %+v", s)
	}
	t.Logf("recovered %s after the outage began, %s after the API server was back; %d list/watch errors",
		time.Since(stopped).Round(time.Millisecond), time.Since(back).Round(time.Millisecond), s.WatchErrors)
	// The doc's promise: an informer resumes within about a second of
	// its API server answering, however long or often it was away
	// (client-go's backoff alone: up to a minute, and more after each
	// outage). A second outage right after the first, with a change made
	// while it lasts: the cache has it within 20 s of the server's
	// return (the bound is loose for a loaded CI machine, where a just
	// restarted API server can be slow to serve its first lists; the
	// backoff alone cost 22 s after a first outage and more than 40 s
	// after a second, as measured).
	if took := time.Since(back); took > 20*time.Second {
		t.Errorf("the cache converged %s after the API server was back; want within 20 s", took.Round(time.Millisecond))
	}
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "unhealthy in the second outage", testutil.True(func() bool { return !pods.Status().Healthy() }))
	// An outage that lasts, as the first did: no signal, its length is the point.
	time.Sleep(10 * time.Second)
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back = time.Now()
	createPod(t, ns, "second", nil)
	testutil.Eventually(t, 20*time.Second, "the cache converged after the second restart", testutil.True(func() bool {
		_, ok, _ := pods.Get(t.Context(), ns, "second")
		return ok && pods.Status().Healthy()
	}))
	took := time.Since(back)
	t.Logf("second outage: the cache had the new pod and was healthy %s after the API server was back", took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("after the second outage the cache converged %s after the API server was back; want within 20 s", took.Round(time.Millisecond))
	}
}

func TestNewNeedsAClient(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a client succeeded")
	}
}

// TestNewClientLimit: a Config with QPS and Burst at zero gets a client
// with no client-side rate limiter (not client-go's 5 a second); a cap
// the caller chose is kept.
func TestNewClientLimit(t *testing.T) {
	for _, c := range []struct {
		qps     float32
		burst   int
		limited bool
	}{{0, 0, false}, {-1, 0, false}, {20, 40, true}} {
		r, err := New(Options{Config: &rest.Config{Host: "https://127.0.0.1:1", QPS: c.qps, Burst: c.burst}})
		if err != nil {
			t.Fatal(err)
		}
		limiter := r.client.CoreV1().RESTClient().(*rest.RESTClient).GetRateLimiter()
		if (limiter != nil) != c.limited || c.limited && limiter.QPS() != c.qps {
			t.Errorf("Config QPS %g, Burst %d: rate limiter %v; want limited %v", c.qps, c.burst, limiter, c.limited)
		}
		r.Close()
	}
}
