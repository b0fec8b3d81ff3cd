package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// runManager starts a manager and returns it with a function that shuts
// it down gracefully and waits for it.
func runManager(t *testing.T, opts Options) (*Manager, func()) {
	t.Helper()
	return runManagerWith(t, opts, nil)
}

// runManagerWith is runManager, calling before (if set) on the Manager
// before its Start.
func runManagerWith(t *testing.T, opts Options, before func(*Manager)) (*Manager, func()) {
	t.Helper()
	if opts.Client == nil && opts.Clusters == nil {
		opts.Client = cluster.Client
	}
	if opts.Registry == nil && opts.Clusters == nil {
		opts.Registry = sharedRegistry(t)
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(m)
	}
	ctx, cancel := context.WithCancel(keptLog(t, t.Context()))
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	if err := m.waitReady(ctxTimeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	return m, stop
}

// waitStatus follows the Manager's Watch until cond holds for s.
func waitStatus(t *testing.T, m *Manager, s naming.Server, what string, cond func(Status) bool) Status {
	t.Helper()
	ctx := ctxTimeout(t, 45*time.Second)
	w := m.Watch(ctx)
	if st, err := m.Status(s); err == nil && cond(st) {
		return st
	}
	for st := range w {
		if st.User == s.Username && st.Server == s.Servername && cond(st) {
			return st
		}
	}
	st, err := m.Status(s)
	t.Fatalf("server %+v never %s: last %+v (%v)", s, what, st, err)
	return st
}

// waitPod waits until a server's pod runs (ready or not).
func waitPod(t *testing.T, ctx context.Context, m *Manager, s naming.Server) *corev1.Pod {
	t.Helper()
	st, err := m.Status(s)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := cluster.WaitForPod(ctx, st.State.Namespace, st.State.PodName, testcluster.PodRunning)
	if err != nil {
		t.Fatalf("the pod of %+v never ran: %v", s, err)
	}
	return pod
}

func phaseIs(p Phase) func(Status) bool {
	return func(st Status) bool { return st.Phase == p }
}

// setPodStatus changes a pod's status as a kubelet would.
func setPodStatus(t *testing.T, ctx context.Context, ns, name string, mutate func(*corev1.Pod)) {
	t.Helper()
	for range 10 {
		pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(pod)
		if _, err = cluster.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not update the pod's status")
}

func markReady(p *corev1.Pod) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = true
	}
	p.Status.Conditions = slices.DeleteFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady || c.Type == corev1.ContainersReady
	})
	p.Status.Conditions = append(p.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now})
}

func exitWith(code int32, reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = nil
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
			p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
		}
	}
}

func TestManagerSpawnIsIdempotentAndStreamsEvents(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns)})
	ctx := ctxTimeout(t, 60*time.Second)
	if l := m.List(); l == nil || len(l) != 0 {
		t.Fatalf("List of an empty manager = %#v, want []", l)
	}
	alice := naming.Server{Username: "m-alice"}
	if _, err := m.Status(alice); !errors.Is(err, ErrNotFound) {
		t.Errorf("Status of an unknown server = %v", err)
	}
	if _, err := m.Stop(ctx, alice, spawner.StopOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stop of an unknown server = %v", err)
	}
	if _, err := m.Events(ctx, alice); !errors.Is(err, ErrNotFound) {
		t.Errorf("Events of an unknown server = %v", err)
	}
	if _, err := m.Poll(ctx, alice); !errors.Is(err, ErrNotFound) {
		t.Errorf("Poll of an unknown server = %v", err)
	}
	st, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env})
	if err != nil || !started || st.Phase != PhaseStarting {
		t.Fatalf("Spawn = %+v, %v, %v", st, started, err)
	}
	// Several readers each get the whole stream.
	var wg sync.WaitGroup
	finals := make([]spawner.ProgressEvent, 3)
	for i := range finals {
		ch, err := m.Events(ctx, alice)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for e := range ch {
				finals[i] = e
			}
		})
	}
	again, started, err := m.Spawn(ctx, alice, SpawnOptions{})
	if err != nil || started || (again.Phase != PhaseStarting && again.Phase != PhaseRunning) {
		t.Errorf("second Spawn = %+v, %v, %v; want the current status, nothing started", again, started, err)
	}
	wg.Wait()
	for i, f := range finals {
		if !f.Ready || f.Progress != 100 {
			t.Errorf("reader %d: final event %+v", i, f)
		}
	}
	running := waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, running.State.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if running.URL != "http://"+pod.Status.PodIP+":8888" || !running.Ready || running.ExitCode != nil || running.ReadyAt == nil {
		t.Errorf("running status %+v", running)
	}
	// Spawn of a running server never restarts it.
	for range 3 {
		if st, started, err := m.Spawn(ctx, alice, SpawnOptions{}); err != nil || started || st.Phase != PhaseRunning {
			t.Errorf("Spawn of a running server = %+v, %v, %v", st, started, err)
		}
	}
	if p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, running.State.PodName, metav1.GetOptions{}); err != nil || p.UID != pod.UID {
		t.Fatalf("Spawn of a running server replaced its pod (%v)", err)
	}
	polled, err := m.Poll(ctx, alice)
	if err != nil || polled.Phase != PhaseRunning || polled.ExitCode != nil {
		t.Errorf("Poll = %+v, %v", polled, err)
	}
	stopped, err := m.Stop(ctx, alice, spawner.StopOptions{Now: true})
	if err != nil || stopped.Phase != PhaseStopped {
		t.Fatalf("Stop = %+v, %v", stopped, err)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, running.State.PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod is still on the API server after Stop: %v", err)
	}
	if polled, err := m.Poll(ctx, alice); err != nil || polled.Phase != PhaseStopped {
		t.Errorf("Poll after Stop = %+v, %v", polled, err)
	}
	if _, err := m.Stop(ctx, alice, spawner.StopOptions{}); err != nil {
		t.Errorf("Stop of a stopped server = %v", err)
	}
}

func TestManagerStopCancelsAStart(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{"testcluster.spawnkit.dev/behavior": "never-ready"}
	m, _ := runManager(t, Options{Config: cfg})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "m-hung"}
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	events, err := m.Events(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	for e := range events {
		if e.Event != nil {
			break // the pod exists
		}
	}
	begin := time.Now()
	st, err := m.Stop(ctx, s, spawner.StopOptions{})
	if err != nil || st.Phase != PhaseStopped {
		t.Fatalf("Stop of a starting server = %+v, %v", st, err)
	}
	t.Logf("Manager.Stop of a starting server: %s", time.Since(begin).Round(time.Millisecond))
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, st.State.PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod is still there: %v", err)
	}
}

// TestManagerHammerOneServer: many goroutines spawn, stop, poll and read
// one server at once. Under -race nothing races, every call returns, and
// the end state is consistent with the cluster.
func TestManagerHammerOneServer(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns)})
	ctx := ctxTimeout(t, 120*time.Second)
	s := naming.Server{Username: "m-hammer"}
	var wg sync.WaitGroup
	var spawns, stops atomic.Int32
	for g := range 12 {
		wg.Go(func() {
			for i := range 6 {
				switch (g + i) % 4 {
				case 0:
					if _, started, err := m.Spawn(ctx, s, SpawnOptions{}); err == nil && started {
						spawns.Add(1)
					} else if err != nil && !errors.Is(err, ErrBusy) {
						t.Errorf("Spawn: %v", err)
					}
				case 1:
					if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err == nil {
						stops.Add(1)
					} else if !errors.Is(err, ErrNotFound) {
						t.Errorf("Stop: %v", err)
					}
				case 2:
					if _, err := m.Poll(ctx, s); err != nil && !errors.Is(err, ErrNotFound) {
						t.Errorf("Poll: %v", err)
					}
				case 3:
					_, _ = m.Status(s)
					_ = m.List()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d starts began, %d stops returned", spawns.Load(), stops.Load())
	// Settle: the last word is a Stop; then nothing may run.
	if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if st, err := m.Status(s); err == nil && st.Phase != PhaseStopped {
		t.Errorf("after a final Stop the phase is %s", st.Phase)
	}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods left after the final Stop", len(pods.Items))
	}
}

func TestManagerSeesExitsEvictionsOOMAndDeletes(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns)})
	ctx := ctxTimeout(t, 120*time.Second)
	type kase struct {
		name   string
		do     func(pod string)
		reason spawner.Reason
		code   int
	}
	cases := []kase{
		{"exit code 3", func(pod string) { setPodStatus(t, ctx, ns, pod, exitWith(3, "Error")) }, spawner.ReasonExited, 3},
		{"OOM killed", func(pod string) { setPodStatus(t, ctx, ns, pod, exitWith(137, "OOMKilled")) }, spawner.ReasonOOMKilled, 137},
		{"evicted", func(pod string) {
			setPodStatus(t, ctx, ns, pod, func(p *corev1.Pod) {
				exitWith(137, "Error")(p)
				p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory."
			})
		}, spawner.ReasonEvicted, 137},
		{"deleted outside the hub", func(pod string) {
			if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		}, spawner.ReasonPodDeleted, 1},
	}
	var latencies []time.Duration
	for round := range 3 {
		for i, tc := range cases {
			s := naming.Server{Username: fmt.Sprintf("m-fail-%d-%d", round, i)}
			if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
				t.Fatal(err)
			}
			st := waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
			w := m.Watch(ctx)
			begin := time.Now()
			tc.do(st.State.PodName)
			var got Status
			for got = range w {
				if got.User == s.Username && got.Phase != PhaseRunning {
					break
				}
			}
			latencies = append(latencies, time.Since(begin))
			if got.Phase != PhaseFailed || got.Reason != tc.reason || got.ExitCode == nil || *got.ExitCode != tc.code {
				t.Errorf("%s: status %+v; want failed, %s, exit %d", tc.name, got, tc.reason, tc.code)
			}
			if polled, err := m.Poll(ctx, s); err != nil || polled.ExitCode == nil || *polled.ExitCode != tc.code {
				t.Errorf("%s: Poll = %+v, %v", tc.name, polled, err)
			}
		}
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	t.Logf("failure detection (status change to Watch event, %d cases): p50 %s, p99 %s, max %s",
		len(latencies), p50.Round(time.Millisecond), p99.Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
}

// countingConfig returns a rest.Config whose requests are counted by
// verb: "list" is a GET of a collection that is not a watch.
func countingConfig(lists *atomic.Int64) *rest.Config {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && r.URL.Query().Get("watch") != "true" && strings.HasSuffix(r.URL.Path, "/pods") {
				lists.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestManagerNeverRelistsInSteadyState(t *testing.T) {
	ns := newNamespace(t)
	var lists atomic.Int64
	cfg := countingConfig(&lists)
	reg, err := reflector.New(reflector.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close) // after the Manager's own cleanup
	client := kubernetes.NewForConfigOrDie(cfg)
	m, _ := runManager(t, Options{Client: client, Registry: reg, Config: baseConfig(ns), ResyncInterval: 100 * time.Millisecond})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "m-steady"}
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
	before, resyncs := lists.Load(), m.resyncs.Load()
	// Ten resync passes (each re-checks every server and every cached
	// pod), counted as they happen, so a broken resync fails here.
	testutil.Eventually(t, 30*time.Second, "ten resyncs", testutil.True(func() bool { return m.resyncs.Load() >= resyncs+10 }))
	if _, err := m.Poll(ctx, s); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load() - before; n != 0 {
		t.Errorf("%d pod LISTs in ten resyncs of steady state; want 0", n)
	}
	t.Logf("pod LISTs in %d resyncs and 1 Poll of steady state: %d", m.resyncs.Load()-resyncs, lists.Load()-before)
}

func TestManagerGracefulShutdownThenRecovery(t *testing.T) {
	ns := newNamespace(t)
	cfg, err := kubespawner.Load([]byte(fmt.Sprintf(`
namespace: %s
image: quay.io/jupyter/base-notebook:2024-01-01
profile_list:
- display_name: Default
  slug: default
  default: true
- display_name: Other port
  slug: port
  kubespawner_override: {port: 9999}
- display_name: Slow
  slug: slow
  kubespawner_override:
    extra_annotations: {"testcluster.spawnkit.dev/behavior": never-ready}
`, ns)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 120*time.Second)
	m1, stop1 := runManager(t, Options{Config: cfg})
	var servers []naming.Server
	for i := range 20 {
		s := naming.Server{Username: fmt.Sprintf("m-rec-%02d", i)}
		opts := SpawnOptions{UserOptions: map[string]string{"profile": "default"}}
		switch {
		case i < 6:
			opts.UserOptions["profile"] = "slow"
		case i == 6:
			opts.SSL = &spawner.SSL{Key: []byte("K"), Cert: []byte("C")}
		case i == 7:
			opts.UserOptions["profile"] = "port"
		}
		if _, _, err := m1.Spawn(ctx, s, opts); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	before := map[string]Status{}
	for i, s := range servers {
		if i < 6 {
			waitPod(t, ctx, m1, s)
			continue
		}
		before[s.Username] = waitStatus(t, m1, s, "running", phaseIs(PhaseRunning))
	}
	uids := map[string]string{}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		uids[p.Name] = string(p.UID)
	}
	stop1() // a graceful shutdown, starts in flight
	pods, err = cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 20 {
		t.Fatalf("%d pods after a graceful shutdown, want all 20", len(pods.Items))
	}
	for _, p := range pods.Items {
		if uids[p.Name] != string(p.UID) || p.DeletionTimestamp != nil {
			t.Errorf("pod %s was replaced or deleted by the shutdown", p.Name)
		}
	}

	// A new Manager on a new Registry.
	fresh, err := reflector.New(reflector.Options{Config: cluster.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close) // after the Manager's own cleanup
	begin := time.Now()
	m2, _ := runManager(t, Options{Config: cfg, Registry: fresh})
	t.Logf("recovery of 20 servers: %s", time.Since(begin).Round(time.Millisecond))
	for i, s := range servers {
		st, err := m2.Status(s)
		if err != nil {
			t.Fatalf("%s not recovered: %v", s.Username, err)
		}
		if i < 6 {
			if st.Phase != PhaseStarting {
				t.Errorf("%s: phase %s, want starting", s.Username, st.Phase)
			}
			continue
		}
		if st.Phase != PhaseRunning || st.URL != before[s.Username].URL {
			t.Errorf("%s: recovered %s at %q, was running at %q", s.Username, st.Phase, st.URL, before[s.Username].URL)
		}
	}
	if u := before[servers[6].Username].URL; !strings.HasPrefix(u, "https://") {
		t.Errorf("the SSL server's URL is %q", u)
	}
	if u := before[servers[7].Username].URL; !strings.HasSuffix(u, ":9999") {
		t.Errorf("the port profile's URL is %q", u)
	}
	// The six starts finish under the new Manager.
	for i := range 6 {
		st, _ := m2.Status(servers[i])
		setPodStatus(t, ctx, ns, st.State.PodName, markReady)
	}
	for i := range 6 {
		st := waitStatus(t, m2, servers[i], "running after recovery", phaseIs(PhaseRunning))
		if st.URL == "" {
			t.Errorf("%s: no URL", servers[i].Username)
		}
	}
}

func TestManagerLeaderFailoverMidSpawn(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{"testcluster.spawnkit.dev/behavior": "never-ready"}
	le := func(id string) *LeaderElection {
		return &LeaderElection{Name: "spawnkit-test", Identity: id, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	}
	ctx := ctxTimeout(t, 90*time.Second)
	a, stopA := runManager(t, Options{Config: cfg, LeaderElection: le("a")})
	testutil.Eventually(t, 20*time.Second, "the first replica leading", testutil.True(a.Leading))
	reg2, err := reflector.New(reflector.Options{Config: cluster.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg2.Close) // after the Manager's own cleanup
	b, _ := runManager(t, Options{Config: cfg, Registry: reg2, LeaderElection: le("b")})
	s := naming.Server{Username: "m-failover"}
	if _, _, err := b.Spawn(ctx, s, SpawnOptions{}); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Spawn on the standby = %v; want ErrNotLeader", err)
	}
	if _, _, err := a.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPod(t, ctx, a, s)
	st, _ := a.Status(s)
	stopA()
	begin := time.Now()
	testutil.Eventually(t, 10*time.Second, "the standby taking over", testutil.True(b.Leading))
	took := time.Since(begin)
	t.Logf("the standby took over %s after the leader went", took.Round(time.Millisecond))
	// A graceful shutdown releases the Lease: the standby need not wait
	// for it to expire (LeaseDuration, 2s, after the last renewal).
	if took >= 2*time.Second {
		t.Errorf("the standby took over %s after a graceful shutdown; want less than the lease duration (2s)", took)
	}
	waitStatus(t, b, s, "starting on the new leader", phaseIs(PhaseStarting))
	setPodStatus(t, ctx, ns, st.State.PodName, markReady)
	waitStatus(t, b, s, "running on the new leader", phaseIs(PhaseRunning))
	list, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].UID != pod.UID {
		t.Errorf("after failover: %d pods; want the one pod %s unchanged", len(list.Items), pod.UID)
	}
}

func TestManagerMetrics(t *testing.T) {
	ns := newNamespace(t)
	reg := prometheus.NewRegistry()
	m, _ := runManager(t, Options{Config: baseConfig(ns), Registerer: reg})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "m-metrics"}
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
		if f.GetName() == "spawnkit_manager_servers" {
			for _, mt := range f.GetMetric() {
				if mt.GetLabel()[0].GetValue() == "running" && mt.GetGauge().GetValue() < 1 {
					t.Errorf("servers{phase=running} = %v", mt.GetGauge().GetValue())
				}
			}
		}
	}
	for _, name := range []string{"spawnkit_manager_spawn_duration_seconds", "spawnkit_manager_servers", "spawnkit_manager_queue_depth", "spawnkit_manager_spawns_in_flight"} {
		if !got[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

func TestManagerNotRunning(t *testing.T) {
	m, err := New(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig("default")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := m.Spawn(ctx, naming.Server{Username: "x"}, SpawnOptions{}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Spawn before Start = %v", err)
	}
	if _, err := m.Status(naming.Server{Username: "x"}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Status before Start = %v", err)
	}
}

func TestManagerForgetsStoppedServersAfterRetention(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns), Retention: 200 * time.Millisecond, ResyncInterval: 100 * time.Millisecond})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "m-retained"}
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
	// Resyncs past the retention (each forgets what is due) leave a
	// running server alone.
	resyncs := m.resyncs.Load()
	testutil.Eventually(t, 10*time.Second, "four resyncs", testutil.True(func() bool { return m.resyncs.Load() >= resyncs+4 }))
	if _, err := m.Status(s); err != nil {
		t.Fatalf("a running server was forgotten: %v", err)
	}
	if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the stopped server forgotten after its retention", testutil.True(func() bool {
		_, err := m.Status(s)
		return errors.Is(err, ErrNotFound)
	}))
	// A forgotten server can be spawned again.
	if _, started, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil || !started {
		t.Fatalf("Spawn after being forgotten = %v, %v", started, err)
	}
	waitStatus(t, m, s, "running again", phaseIs(PhaseRunning))
}

func TestManagerSeedsAndThePodRecordWins(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)
	cfg := baseConfig(ns)
	m1, stop1 := runManager(t, Options{Config: cfg})
	running := naming.Server{Username: "m-seed-running"}
	if _, _, err := m1.Spawn(ctx, running, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	want := waitStatus(t, m1, running, "running", phaseIs(PhaseRunning))
	stop1()

	stopped := naming.Server{Username: "m-seed-stopped"}
	m2, _ := runManager(t, Options{Config: cfg, Registry: newRegistry(t), Seed: []Seed{
		{Server: stopped, State: spawner.State{PodName: "jupyter-from-the-hub-db", Namespace: ns, PVCName: "claim-kept"}},
		{Server: running, State: spawner.State{PodName: "jupyter-stale-name", Namespace: ns, Port: 1234}},
	}})
	st, err := m2.Status(running)
	if err != nil || st.Phase != PhaseRunning || st.URL != want.URL || st.State.PodName != want.State.PodName {
		t.Errorf("seeded running server = %+v, %v; want the pod's record (%s)", st, err, want.URL)
	}
	st, err = m2.Status(stopped)
	if err != nil || st.Phase != PhaseStopped || st.State.PodName != "jupyter-from-the-hub-db" || st.State.PVCName != "claim-kept" {
		t.Errorf("seeded stopped server = %+v, %v", st, err)
	}
}

func newRegistry(t *testing.T) *reflector.Registry {
	t.Helper()
	reg, err := reflector.New(reflector.Options{Config: cluster.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close) // after the Manager using it has stopped
	return reg
}

// TestManagerReportsAFailureBeforeDeletingThePod: the Manager's status
// turns failed as soon as the cache shows the exit; the delete of the
// stopped pod (delete_stopped_pods) comes after, so a slow API server
// does not delay what a hub watching for failures sees.
func TestManagerReportsAFailureBeforeDeletingThePod(t *testing.T) {
	ns := newNamespace(t)
	release := make(chan struct{})
	var held atomic.Int64
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/pods/") {
				held.Add(1)
				select {
				case <-release:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}
			return rt.RoundTrip(r)
		})
	}
	m, _ := runManager(t, Options{Client: kubernetes.NewForConfigOrDie(cfg), Config: baseConfig(ns)})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "m-fail-first"}
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
	w := m.Watch(ctx)
	setPodStatus(t, ctx, ns, st.State.PodName, exitWith(3, "Error"))
	var got Status
	for got = range w {
		if got.User == s.Username && got.Phase != PhaseRunning {
			break
		}
	}
	if got.Phase != PhaseFailed || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Fatalf("status after the exit = %+v; want failed with exit 3", got)
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, st.State.PodName, metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp != nil {
		t.Fatalf("the failure was reported after the stopped pod's delete (pod: %v, %v)", pod.DeletionTimestamp, err)
	}
	close(release)
	if _, err := cluster.WaitForPod(ctx, ns, st.State.PodName, testcluster.PodGone); err != nil {
		t.Fatalf("the stopped pod was not deleted once the API answered: %v", err)
	}
	if held.Load() == 0 {
		t.Error("no pod DELETE was sent")
	}
}

// TestManagerSeesAnExitAtTheEndOfAStart: while a start is in flight the
// Manager does not reconcile its server on each pod change (the start
// follows the pod), so a pod that ends after the start saw it ready but
// before the start returned must be reconciled when the start ends. The
// PodURL hook runs in that window: it makes the pod exit and waits until
// the Manager's cache has seen it. The server must then fail at once, not
// at the next resync (an hour away here).
func TestManagerSeesAnExitAtTheEndOfAStart(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 90*time.Second)
	pods, err := sharedRegistry(t).Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	hooks := spawner.Hooks{PodURL: func(s *spawner.Spawner, pod *reflector.Pod, url string) string {
		// The hook runs in the start's goroutine: errors, not t.Fatal.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := cluster.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			exitWith(3, "Error")(p)
			_, err = cluster.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Errorf("making pod %s/%s exit: %v", pod.Namespace, pod.Name, err)
			return url
		}
		_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			p, ok, err := pods.Get(ctx, pod.Namespace, pod.Name)
			return err == nil && ok && p.Phase == corev1.PodFailed, nil
		})
		return url
	}}
	m, _ := runManager(t, Options{Config: baseConfig(ns), Hooks: hooks, ResyncInterval: time.Hour})
	s := naming.Server{Username: "exits-at-the-end"}
	w := m.Watch(ctx)
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	var phases []Phase
	deadline := time.After(20 * time.Second)
	for {
		select {
		case st := <-w:
			if st.User != s.Username {
				continue
			}
			phases = append(phases, st.Phase)
			if st.Phase == PhaseFailed {
				if st.Reason != spawner.ReasonExited || st.ExitCode == nil || *st.ExitCode != 3 {
					t.Errorf("failed with %+v; want reason %s, exit code 3", st, spawner.ReasonExited)
				}
				return
			}
		case <-deadline:
			t.Fatalf("the server never failed after its pod exited at the end of its start; phases %v", phases)
		}
	}
}

// A successful spawn costs no reconcile: the start sets the phase from
// the pod version it found ready, and neither its end nor that version's
// notification arriving afterwards wakes a worker. A change after that
// version still is reconciled (TestManagerSeesAnExitAtTheEndOfAStart).
func TestManagerSpawnCostsNoReconcile(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns), ResyncInterval: time.Hour})
	ctx := ctxTimeout(t, 60*time.Second)
	servers := make([]naming.Server, 5)
	for i := range servers {
		servers[i] = naming.Server{Username: fmt.Sprintf("no-reconcile-%d", i)}
		if _, _, err := m.Spawn(ctx, servers[i], SpawnOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range servers {
		waitStatus(t, m, s, "running", func(st Status) bool { return st.Phase == PhaseRunning })
	}
	// The ready versions' notifications have come by once a marker pod
	// created after them has been reconciled: the informer's handler sees
	// pod changes in order, and the marker is an unknown server's pod,
	// which is reconciled (adopted).
	marker := naming.Server{Username: "no-reconcile-marker"}
	markerPod := newSpawner(t, marker, baseConfig(ns)).State().PodName // where the Manager trusts it
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: markerPod,
		Labels:      map[string]string{naming.LabelComponent: naming.DefaultComponent, naming.LabelManagedBy: naming.ManagedBySpawnkit},
		Annotations: map[string]string{naming.AnnotationUsername: marker.Username}},
		Spec: corev1.PodSpec{NodeName: "spawnkit-no-kubelet", Containers: []corev1.Container{{Name: "notebook", Image: "i"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the marker pod's server adopted", testutil.True(func() bool {
		_, err := m.Status(marker)
		return err == nil
	}))
	if n := m.reconciles.Load(); n != 1 {
		t.Errorf("%d reconciles after %d spawns and a marker pod, want 1 (the marker's)", n, len(servers))
	}
	// A later change of a pod is reconciled.
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, mustPodName(t, m, servers[0]), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, servers[0], "failed or stopped after its pod was deleted", func(st Status) bool {
		return st.Phase == PhaseFailed || st.Phase == PhaseStopped
	})
	if m.reconciles.Load() == 0 {
		t.Error("the deletion of a running server's pod was not reconciled")
	}
}

func mustPodName(t *testing.T, m *Manager, s naming.Server) string {
	t.Helper()
	st, err := m.Status(s)
	if err != nil {
		t.Fatal(err)
	}
	return st.State.PodName
}

// A reader of Events that sees a start's final event finds its outcome in
// Status at once: the final event comes after the phase change.
func TestManagerFinalEventAfterThePhase(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns)})
	ctx := ctxTimeout(t, 90*time.Second)
	for i := range 10 {
		s := naming.Server{Username: fmt.Sprintf("final-%d", i)}
		if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
			t.Fatal(err)
		}
		events, err := m.Events(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		var last spawner.ProgressEvent
		for e := range events {
			last = e
		}
		if !last.Ready {
			t.Fatalf("%s: the stream ended with %+v, want ready", s.Username, last)
		}
		if st, err := m.Status(s); err != nil || st.Phase != PhaseRunning || st.URL != last.URL {
			t.Errorf("%s: Status right after the ready event = %+v, %v; want running at %s", s.Username, st, err, last.URL)
		}
	}
}

// keptLogLines bounds the Manager log lines keptLog holds.
const keptLogLines = 3000

// keptLog is parent with a logger (verbosity 1) whose last keptLogLines
// lines are printed if the test fails: a failure under CI's load is then
// explained by what the Manager did, not guessed at.
func keptLog(t *testing.T, parent context.Context) context.Context {
	var (
		mu    sync.Mutex
		lines []string
	)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("the Manager's last %d log lines:\n%s", len(lines), strings.Join(lines, "\n"))
	})
	return logr.NewContext(parent, funcr.New(func(prefix, args string) {
		line := time.Now().Format("15:04:05.000") + " " + prefix + " " + args
		mu.Lock()
		defer mu.Unlock()
		if len(lines) == keptLogLines {
			lines = lines[1:]
		}
		lines = append(lines, line)
	}, funcr.Options{Verbosity: 1}))
}

// TestManagerDropsFinishedProgress: Events streams an operation whole
// while it runs, however many resyncs pass, and for streamKept after it
// ended; a resync after that drops it (a closed stream, as from a
// restarted Manager), and the next operation has a stream of its own.
func TestManagerDropsFinishedProgress(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady}
	short := func(m *Manager) { m.streamKept = 200 * time.Millisecond }
	slow, _ := runManagerWith(t, Options{Config: cfg, ResyncInterval: 100 * time.Millisecond}, short)
	m, _ := runManagerWith(t, Options{Config: baseConfig(ns), ResyncInterval: 100 * time.Millisecond}, short)
	ctx := ctxTimeout(t, 90*time.Second)
	events := func(m *Manager, s naming.Server) []spawner.ProgressEvent {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ch, err := m.Events(rctx, s)
		if err != nil {
			t.Fatal(err)
		}
		var out []spawner.ProgressEvent
		for ev := range ch {
			out = append(out, ev)
		}
		return out
	}

	// A start in flight keeps its stream past streamKept.
	pending := naming.Server{Username: "progress-pending"}
	if _, _, err := slow.Spawn(ctx, pending, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	resyncs := slow.resyncs.Load()
	testutil.Eventually(t, 10*time.Second, "five resyncs", testutil.True(func() bool { return slow.resyncs.Load() >= resyncs+5 }))
	if evs := events(slow, pending); len(evs) == 0 {
		t.Error("a start in flight has no progress after resyncs past streamKept")
	}
	if _, err := slow.Stop(ctx, pending, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}

	s := naming.Server{Username: "progress-dropped"}
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
	first := events(m, s)
	if len(first) == 0 || !first[len(first)-1].Ready {
		t.Fatalf("the finished start's progress right after it: %+v; want it whole, ending ready", first)
	}
	testutil.Eventually(t, 10*time.Second, "the finished start's progress dropped", testutil.True(func() bool { return len(events(m, s)) == 0 }))
	if _, err := m.Status(s); err != nil {
		t.Fatalf("dropping the progress forgot the server: %v", err)
	}
	// The stop has a stream of its own.
	if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	if evs := events(m, s); len(evs) == 0 {
		t.Error("the stop that just ended has no progress")
	}
}

// TestManagerKeepsProgressFromOpEnd: the stream of a finished operation
// is kept for streamKept from the operation's end, not from the phase's
// last change. An operation can end without changing the phase (a start
// or resume detached at the end of a term leaves the server starting);
// here the phase change is moved an hour back instead, the stream must
// survive resyncs, and once the end is streamKept back it is dropped.
func TestManagerKeepsProgressFromOpEnd(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns), ResyncInterval: 100 * time.Millisecond})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "progress-op-end"}
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
	e := m.lookup(s)
	backdate := func(field *time.Time, by time.Duration) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.op != nil {
			t.Fatal("the start's operation is still registered once the server runs")
		}
		*field = field.Add(-by)
	}
	resyncs := func(n int64) {
		t.Helper()
		from := m.resyncs.Load()
		testutil.Eventually(t, 10*time.Second, "resyncs", testutil.True(func() bool { return m.resyncs.Load() >= from+n }))
	}
	backdate(&e.changed, time.Hour)
	resyncs(3)
	if evs := progressSoFar(t, m, s); len(evs) == 0 {
		t.Fatalf("the progress of a start that ended under %s ago was dropped: the phase's change, an hour back, timed it", m.streamKept)
	}
	backdate(&e.opEnded, m.streamKept)
	testutil.Eventually(t, 10*time.Second, "the progress dropped streamKept after the start ended", testutil.True(func() bool {
		return len(progressSoFar(t, m, s)) == 0
	}))
}
