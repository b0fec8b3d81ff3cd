package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// apiClusters is the spawn run of the clusters rows (spawnRun.API).
const apiClusters = "clusters"

// The configurations of the clusters rows (spawnRun.Side). In each, 100
// servers (-quick: 20) are spawned at once on cluster A through
// Manager.Spawn, as in the manager rows.
const (
	// clustersAlone: a Manager of cluster A alone (Options.Client and
	// Registry, as a one-cluster hub runs it); cluster B idle.
	clustersAlone = "alone"
	// clustersTwoIdle: one Manager of clusters A and B (Options.Clusters,
	// A the default), B idle: what a cluster more costs by being there
	// (its informers, its health checks, placement among two).
	clustersTwoIdle = "two-idle"
	// clustersTwo: the same Manager while cluster B is kept busy through
	// it (busyLoad, its servers placed on B by a profile).
	clustersTwo = "two-busy"
	// clustersSeparate: the control of clustersTwo: a Manager of cluster
	// A alone and, in the same process, a Manager of cluster B alone,
	// kept as busy. Against clustersTwo it leaves out what a busy B costs
	// the machine and the process (B's API server, etcd, kwok and client
	// work share the 2 cores either way) and keeps what sharing one
	// Manager costs A.
	clustersSeparate = "separate-busy"
)

// clustersSpawns is how many servers a clusters run spawns on cluster A.
const clustersSpawns = 100

// The profiles of the clusters rows: the default stays on the default
// cluster; "b" names cluster b (kubernetes_cluster). A Manager of one
// cluster has only the default (it refuses a profile naming a cluster it
// does not have).
var (
	profileDefault = kubespawner.Profile{DisplayName: "Default", Slug: "default", Default: true}
	profileB       = kubespawner.Profile{DisplayName: "Cluster B", Slug: "b", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "b"}}
)

// measureClusters measures what one cluster more costs spawns on the
// first (issue 31): Manager.Spawn of 100 servers at once on cluster A in
// four configurations (see the constants): a Manager of A alone, B idle;
// a Manager of A and B, B idle; the same with B kept busy through it;
// and a Manager each, B as busy. It starts the second simulated cluster
// (B) for its runs and stops it after. Each run is a child process in a
// fresh namespace (of the same name in both clusters), as the manager
// rows; the order of the four alternates between repeats. Rows:
// throughput (servers running per second) and the median time from the
// clock's start to a server running, as ratios of
//   - two-idle/alone: the cost of a second cluster being there (goals);
//   - two-busy/separate-busy: the cost of sharing one Manager with a busy
//     cluster, the machine equally loaded on both sides (goals);
//   - two-busy/alone: both together with what a busy B costs the 2
//     cores (no goal: on one machine B's control plane competes with
//     A's; in production they are different machines).
//
// In each row the "spawnkit" column is the first configuration named,
// the "raw" column the second.
func measureClusters(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	n := clustersSpawns
	if env.Quick {
		n = 20
	}
	startCtx, cancel := context.WithTimeout(ctx, testcluster.StartTimeout)
	defer cancel()
	fmt.Fprintln(os.Stderr, "starting the second simulated cluster (B)...")
	b, err := testcluster.Start(startCtx, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1})
	if err != nil {
		return nil, fmt.Errorf("starting the second simulated cluster: %w", err)
	}
	defer func() {
		if err := b.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: stopping cluster B:", err)
		}
	}()
	if b.PodCIDR == env.Cluster.PodCIDR {
		return nil, fmt.Errorf("both clusters give pods %s", b.PodCIDR)
	}
	fmt.Fprintf(os.Stderr, "cluster B: pods from %s, %d servers kept cycling on it in the busy runs\n", b.PodCIDR, env.BusyB)

	what := fmt.Sprintf("Manager.Spawn on cluster A, %d concurrent", n)
	busy := fmt.Sprintf("B busy (%d servers cycling)", env.BusyB)
	vsIdle := "Manager of A and B vs Manager of A alone, B idle"
	vsSeparate := fmt.Sprintf("Manager of A and B vs a Manager each, %s either way", busy)
	vsLoad := fmt.Sprintf("Manager of A and B, %s vs Manager of A alone, B idle", busy)
	through := Measure{Name: fmt.Sprintf("spawn throughput, %s: %s", what, vsIdle), Unit: "spawns/s",
		Better: Higher, Goal: &Goal{Of: "ratio", Value: 0.9}}
	latency := Measure{Name: fmt.Sprintf("spawn to running p50, %s: %s", what, vsIdle), Unit: "ms",
		Better: Lower, Goal: &Goal{Of: "ratio", Value: 1.15}}
	throughSep := Measure{Name: fmt.Sprintf("spawn throughput, %s: %s", what, vsSeparate), Unit: "spawns/s",
		Better: Higher, Goal: &Goal{Of: "ratio", Value: 0.9}}
	latencySep := Measure{Name: fmt.Sprintf("spawn to running p50, %s: %s", what, vsSeparate), Unit: "ms",
		Better: Lower, Goal: &Goal{Of: "ratio", Value: 1.15}}
	throughLoad := Measure{Name: fmt.Sprintf("spawn throughput, %s: %s", what, vsLoad), Unit: "spawns/s", Better: Higher}
	latencyLoad := Measure{Name: fmt.Sprintf("spawn to running p50, %s: %s", what, vsLoad), Unit: "ms", Better: Lower}
	rows := []*Measure{&through, &latency, &throughSep, &latencySep, &throughLoad, &latencyLoad}
	var details []clustersDetail
	out := func() []Measure {
		through.Detail = details
		return []Measure{through, latency, throughSep, latencySep, throughLoad, latencyLoad}
	}
	for r := range repeats {
		// Alternate the order, so that no configuration always meets
		// the clusters warmer or busier.
		sides := []string{clustersAlone, clustersTwoIdle, clustersTwo, clustersSeparate}
		if r%2 == 1 {
			slices.Reverse(sides)
		}
		results := map[string]spawnResult{}
		for _, side := range sides {
			res, runErr, err := clustersRunOnce(ctx, env, b, side, n, r)
			if err != nil {
				return out(), fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
			}
			if runErr != nil {
				msg := fmt.Sprintf("%s, repeat %d, %s: %v", what, r+1, side, runErr)
				fmt.Fprintln(os.Stderr, msg)
				for _, m := range rows {
					m.Failed = append(m.Failed, msg)
				}
				continue
			}
			results[side] = res
			d := clustersDetail{Repeat: r + 1, Side: side, Elapsed: res.Elapsed, Phases: res.Phases,
				RequestsPerSpawn: total(perSpawn(nil, res.Calls, n)), CPUMsPerSpawn: msPer(res.CPU, n), Busy: res.Busy}
			details = append(details, d)
			busy := "cluster B idle"
			if w := res.Busy; w != nil {
				busy = fmt.Sprintf("cluster B meanwhile: %d started, %d running, %d stopped, %d failed (%.1f running/s)",
					w.Started, w.Running, w.Stopped, w.Failed, float64(w.Running)/res.Elapsed.Seconds())
				for _, e := range w.Errors {
					fmt.Fprintf(os.Stderr, "clusters repeat %d %s: cluster B: %s\n", r+1, side, e)
				}
			}
			fmt.Fprintf(os.Stderr, "clusters n=%d repeat %d: %-8s %s (%.1f/s), ready p50 %s, %.2f requests/spawn on A, %.2f CPU ms/spawn (the process's, B's work included); %s; %s\n",
				n, r+1, side, res.Elapsed.Round(time.Millisecond), float64(n)/res.Elapsed.Seconds(), res.Phases.ReadyP50.Round(time.Millisecond),
				d.RequestsPerSpawn, d.CPUMsPerSpawn, busy, res.Phases)
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		pair := func(through, latency *Measure, a, b string) {
			ra, okA := results[a]
			rb, okB := results[b]
			if okA && okB {
				through.Add(float64(n)/ra.Elapsed.Seconds(), float64(n)/rb.Elapsed.Seconds())
				latency.Add(ms(ra.Phases.ReadyP50), ms(rb.Phases.ReadyP50))
			}
		}
		pair(&through, &latency, clustersTwoIdle, clustersAlone)
		pair(&throughSep, &latencySep, clustersTwo, clustersSeparate)
		pair(&throughLoad, &latencyLoad, clustersTwo, clustersAlone)
	}
	return out(), nil
}

// clustersDetail is one run of the clusters rows, in their Detail.
type clustersDetail struct {
	Repeat           int           `json:"repeat"`
	Side             string        `json:"side"`
	Elapsed          time.Duration `json:"elapsed"`
	Phases           phases        `json:"phases"`
	RequestsPerSpawn float64       `json:"requests_per_spawn_on_a"`
	CPUMsPerSpawn    float64       `json:"process_cpu_ms_per_spawn"`
	Busy             *busyWindow   `json:"cluster_b,omitempty"`
}

// clustersRunOnce runs one configuration in a child process, in a fresh
// namespace of the same name in both clusters, then deletes it in both,
// waiting until it is gone, and waits for a quiet machine, as
// spawnRunOnce does.
func clustersRunOnce(ctx context.Context, env *Env, b *testcluster.Cluster, side string, n, repeat int) (res spawnResult, runErr, err error) {
	ns, err := env.NewNamespace(ctx, "clusters-"+side)
	if err != nil {
		return spawnResult{}, nil, err
	}
	envB := &Env{Client: b.Client} // for DeleteNamespace
	if _, err := b.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return spawnResult{}, nil, fmt.Errorf("creating namespace %s in cluster B: %w", ns, err)
	}
	spec := spawnRun{API: apiClusters, Side: side, Namespace: ns, N: n, Kubeconfig: env.Cluster.Kubeconfig, KubeconfigB: b.Kubeconfig,
		BusyB: env.BusyB, SpawnLimit: env.SpawnLimit, NoEvents: env.NoEvents}
	if env.CPUProfile != "" {
		spec.Profile = fmt.Sprintf("%s-%s-%d-%s-r%d.pprof", env.CPUProfile, apiClusters, n, side, repeat+1)
	}
	if env.MemProfile != "" {
		spec.MemProfile = fmt.Sprintf("%s-%s-%d-%s-r%d", env.MemProfile, apiClusters, n, side, repeat+1)
	}
	res, runErr = runInChild(ctx, env.Self, spec)
	if ctx.Err() != nil {
		return res, nil, context.Cause(ctx)
	}
	timeout := 2*time.Minute + time.Duration(n)*300*time.Millisecond
	var g errgroup.Group
	g.Go(func() error { return env.DeleteNamespace(ctx, ns, timeout) })
	g.Go(func() error {
		if err := envB.DeleteNamespace(ctx, ns, timeout); err != nil {
			return fmt.Errorf("cluster B: %w", err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return res, runErr, err
	}
	select {
	case <-time.After(settle(n + env.BusyB)):
	case <-ctx.Done():
		return res, runErr, context.Cause(ctx)
	}
	if err := awaitQuiet(ctx, fmt.Sprintf("the run after clusters n=%d repeat %d %s", n, repeat+1, side), quietBetweenRuns); err != nil {
		return res, runErr, err
	}
	return res, runErr, nil
}

// prepareClusters is the child's side of a clusters run (spec.Side):
// the Managers of its configuration, running on warm Registries and
// recovered, and, but for clustersAlone, cluster B kept busy from now
// until done (every worker has had a server running before it returns).
// The spawns are A's, through managerSpawns with the default profile;
// the measured call records what B did meanwhile (busyInWindow).
func prepareClusters(ctx context.Context, client kubernetes.Interface, spec spawnRun) (spawnFunc, func(), error) {
	var cleanups []func() // in the order they run
	done := func() {
		for _, f := range cleanups {
			f()
		}
	}
	fail := func(err error) (spawnFunc, func(), error) { done(); return nil, nil, err }
	config := func(profiles ...kubespawner.Profile) kubespawner.Config {
		c := spawnConfig(spec.Namespace)
		c.EventsEnabled = new(!spec.NoEvents)
		c.ProfileList = profiles
		return c
	}
	regA, releaseA, err := warmRegistry(ctx, client, spec.Namespace, !spec.NoEvents)
	if err != nil {
		return nil, nil, err
	}
	var clientB kubernetes.Interface
	if spec.Side != clustersAlone {
		cfgB, err := clientcmd.BuildConfigFromFlags("", spec.KubeconfigB)
		if err != nil {
			releaseA()
			return nil, nil, err
		}
		cfgB.QPS, cfgB.Burst = 50, 100 // a client of its own, as cluster A's
		if clientB, err = kubernetes.NewForConfig(cfgB); err != nil {
			releaseA()
			return nil, nil, err
		}
	}

	var mA, mB *manager.Manager // mB: the Manager that keeps B busy
	busyOpts := manager.SpawnOptions{}
	switch spec.Side {
	case clustersAlone, clustersSeparate:
		m, stop, err := startManager(ctx, manager.Options{Client: client, Registry: regA, Config: config(profileDefault),
			ConcurrentSpawnLimit: spec.SpawnLimit})
		if err != nil {
			releaseA()
			return nil, nil, err
		}
		mA = m
		cleanups = append(cleanups, stop, releaseA)
		if spec.Side == clustersSeparate {
			regB, releaseB, err := warmRegistry(ctx, clientB, spec.Namespace, !spec.NoEvents)
			if err != nil {
				return fail(err)
			}
			m, stop, err := startManager(ctx, manager.Options{Client: clientB, Registry: regB, Config: config(profileDefault),
				ConcurrentSpawnLimit: spec.SpawnLimit})
			if err != nil {
				releaseB()
				return fail(err)
			}
			mB = m
			cleanups = append(cleanups, stop, releaseB)
		}
	case clustersTwo, clustersTwoIdle:
		regB, releaseB, err := warmRegistry(ctx, clientB, spec.Namespace, !spec.NoEvents)
		if err != nil {
			releaseA()
			return nil, nil, err
		}
		m, stop, err := startManager(ctx, manager.Options{Config: config(profileDefault, profileB), ConcurrentSpawnLimit: spec.SpawnLimit,
			Clusters: []manager.Cluster{{Name: "a", Client: client, Registry: regA}, {Name: "b", Client: clientB, Registry: regB}}})
		if err != nil {
			releaseB()
			releaseA()
			return nil, nil, err
		}
		mA = m
		if spec.Side == clustersTwo {
			mB = m
		}
		busyOpts.UserOptions = map[string]string{"profile": profileB.Slug}
		cleanups = append(cleanups, stop, releaseB, releaseA)
	default:
		releaseA()
		return nil, nil, fmt.Errorf("no configuration %q of the clusters rows", spec.Side)
	}

	spawns, stopWatch := managerSpawns(ctx, mA, manager.SpawnOptions{})
	cleanups = append([]func(){stopWatch}, cleanups...)
	if mB == nil {
		return spawns, done, nil
	}
	load, stopLoad, err := startBusy(ctx, mB, spec.BusyB, busyOpts)
	if err != nil {
		return fail(fmt.Errorf("keeping cluster B busy: %w", err))
	}
	// The load ends first: its servers are stopped while the Managers
	// still run.
	cleanups = append([]func(){stopLoad}, cleanups...)
	return func(ctx context.Context, first, n int, ready func()) error {
		if first != 0 {
			return spawns(ctx, first, n, ready) // the warm-up
		}
		before := load.count()
		err := spawns(ctx, first, n, ready)
		w := load.count()
		w.Workers = load.workers
		w.Started -= before.Started
		w.Running -= before.Running
		w.Stopped -= before.Stopped
		w.Failed -= before.Failed
		w.Errors = load.errors()
		busyInWindow = &w
		return err
	}, done, nil
}

// busyInWindow is what cluster B did during a clusters run's measured
// spawns, set in the child by prepareClusters' spawns (nil when B was
// idle); runChild reports it.
var busyInWindow *busyWindow

// busyWindow counts a busyLoad's servers: started (Spawn accepted),
// reported running, stopped (pod gone) and failed (a Spawn, start or
// Stop that failed, with the first errors).
type busyWindow struct {
	Workers int      `json:"workers"`
	Started int64    `json:"started"`
	Running int64    `json:"running"`
	Stopped int64    `json:"stopped"`
	Failed  int64    `json:"failed"`
	Errors  []string `json:"errors,omitempty"`
}

// busyLoad keeps a cluster busy through a Manager, as a hub's other
// users do: each worker starts a server (with opts, which place it in
// that cluster), waits until the Manager's Watch reports it running,
// stops it (Stop returns once its pod is gone), and starts the next,
// until stop.
type busyLoad struct {
	workers                           int
	started, running, stopped, failed atomic.Int64
	quit                              chan struct{}

	mu      sync.Mutex // guards waiting and errs
	waiting map[string]chan manager.Status
	errs    []string
}

// maxBusyErrors is how many errors a busyLoad keeps.
const maxBusyErrors = 5

// startBusy starts workers on m and returns once each has had a server
// running (the load is steady); stop ends them, each after stopping its
// server, and waits.
func startBusy(ctx context.Context, m *manager.Manager, workers int, opts manager.SpawnOptions) (*busyLoad, func(), error) {
	l := &busyLoad{workers: workers, quit: make(chan struct{}), waiting: map[string]chan manager.Status{}}
	watchCtx, cancelWatch := context.WithCancel(ctx)
	watch := m.Watch(watchCtx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for st := range watch {
			if st.Phase != manager.PhaseRunning && st.Phase != manager.PhaseFailed {
				continue
			}
			l.mu.Lock()
			ch := l.waiting[st.User]
			delete(l.waiting, st.User)
			l.mu.Unlock()
			if ch != nil {
				ch <- st // buffered: never blocks
			}
		}
	})
	var workersDone sync.WaitGroup
	for w := range workers {
		workersDone.Go(func() { l.work(ctx, m, w, opts) })
	}
	stop := func() {
		close(l.quit)
		workersDone.Wait()
		cancelWatch()
		wg.Wait()
	}
	for l.running.Load() < int64(workers) {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			stop()
			return nil, nil, fmt.Errorf("%d of %d workers had a server running: %w (%v)", l.running.Load(), workers, ctx.Err(), l.errors())
		}
	}
	return l, stop, nil
}

func (l *busyLoad) work(ctx context.Context, m *manager.Manager, w int, opts manager.SpawnOptions) {
	for i := 0; ; i++ {
		select {
		case <-l.quit:
			return
		case <-ctx.Done():
			return
		default:
		}
		s := naming.Server{Username: fmt.Sprintf("busy%02d-%05d", w, i), UserID: int64(1_000_000 + w*100_000 + i)}
		ch := make(chan manager.Status, 1)
		l.mu.Lock()
		l.waiting[s.Username] = ch
		l.mu.Unlock()
		if _, _, err := m.Spawn(ctx, s, opts); err != nil {
			l.mu.Lock()
			delete(l.waiting, s.Username)
			l.mu.Unlock()
			l.fail(fmt.Errorf("spawning %s: %w", s.Username, err))
			time.Sleep(100 * time.Millisecond) // no busy loop on a refusing Manager
			continue
		}
		l.started.Add(1)
		select {
		case st := <-ch:
			if st.Phase == manager.PhaseFailed {
				l.fail(fmt.Errorf("server of %s failed: %s: %s", s.Username, st.Reason, st.Message))
			} else {
				l.running.Add(1)
			}
		case <-ctx.Done():
			return
		}
		if _, err := m.Stop(ctx, s, spawner.StopOptions{}); err != nil {
			l.fail(fmt.Errorf("stopping %s: %w", s.Username, err))
			continue
		}
		l.stopped.Add(1)
	}
}

func (l *busyLoad) fail(err error) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < maxBusyErrors {
		l.errs = append(l.errs, err.Error())
	}
}

func (l *busyLoad) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

func (l *busyLoad) count() busyWindow {
	return busyWindow{Started: l.started.Load(), Running: l.running.Load(), Stopped: l.stopped.Load(), Failed: l.failed.Load()}
}
