package manager

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"

	"github.com/spawnkit/spawnkit/internal/leader"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// Start runs the Manager until ctx ends: it takes the pod informer for
// the Manager's lifetime (so nothing relists in steady state), recovers
// every server recorded on a pod in the cluster, then reconciles servers
// on pod events through a rate-limited workqueue and on a jittered
// resync. With LeaderElection it runs servers only while it holds the
// Lease, and a Lease it cannot read, create or update (a namespace that
// does not exist, a missing RBAC rule) is an error returned at once.
//
// When ctx ends (or the lease is lost), the Manager stops taking work and
// cancels its starts with ErrShutdown: they are detached, never deleted,
// and the next leader resumes them. Stops and deletions in flight may
// finish first (see LeaderElection); only then is the Lease released.
// Start returns after every goroutine it started has ended.
func (m *Manager) Start(ctx context.Context) (err error) {
	log := logr.FromContextOrDiscard(ctx).WithName("manager")
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errAlreadyStarted
	}
	m.started = true
	m.mu.Unlock()
	// Last of Start's deferred calls: WaitLeading then sees running unset.
	defer close(m.stopped)
	// Before stopped closes: a WaitReady or WaitLeading that saw Start
	// fail reports why (a hub's errgroup may see its error first).
	defer func() {
		m.mu.Lock()
		m.startErr = err
		m.mu.Unlock()
	}()
	var r runState
	defer m.shutdown(&r)
	recovered, err := m.setUp(ctx, log, &r)
	// The one place ready closes: set-up has recovered the servers, or
	// has failed (waitReady tells which from running and ran).
	close(m.ready)
	if !recovered {
		return err
	}
	if m.multi {
		stopWatching := m.startClusterWatch(ctx)
		defer stopWatching()
	}
	for range m.opts.Workers {
		r.workers.Go(func() {
			for m.processNext(ctx, log) {
			}
		})
	}
	return m.serve(ctx, log)
}

// runState is what Start's set-up acquired, for shutdown to give back.
// Only Start's goroutine reads or changes it (workers aside, which the
// worker goroutines mark done).
type runState struct {
	sets    []*podSet // every cluster's pod informers
	removes []func()  // the pod observers, in the order added
	// running is set once set-up has made the Manager running: shutdown
	// then stops the queue, the workers, the Spawners and the watchers.
	running bool
	workers sync.WaitGroup
}

// setUp runs Start's phases up to recovery: the clusters' versions, the
// Lease, the pod informers, the queue and the pod observers, then
// recovery once the caches have synced. It reports whether the servers
// were recovered; when they were not, err is Start's error (nil when ctx
// ended before the first sync). r records what it acquired, for
// shutdown, also when it fails.
func (m *Manager) setUp(ctx context.Context, log logr.Logger, r *runState) (recovered bool, err error) {
	// Once per cluster, before any watch: a server older than spawnkit
	// supports is refused with its version rather than misbehaving
	// later.
	if err := m.checkVersions(ctx, log); err != nil {
		return false, err
	}
	if m.lease != nil {
		if err := leader.Check(ctx, *m.lease); err != nil {
			m.observeLease(err)
			return false, fmt.Errorf("manager: %w", err)
		}
	}
	if err := m.acquireInformers(ctx, r); err != nil {
		return false, err
	}
	m.mu.Lock()
	m.log = log
	m.running, m.ran = true, true
	m.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[serverKey](),
		workqueue.TypedRateLimitingQueueConfig[serverKey]{Name: "spawnkit-manager"})
	m.mu.Unlock()
	r.running = true

	// Observe, not OnChange: no replay is needed (recover reads the cache
	// once it has synced, after this), and a client-go listener of its
	// own would cost two goroutine hand-offs for every pod change.
	for _, c := range m.cells {
		remove, err := c.pods.Observe(func(pod *reflector.Pod, deleted bool) { m.podChanged(c, pod, deleted) })
		if err != nil {
			return false, err
		}
		r.removes = append(r.removes, remove)
	}
	// The clusters sync at once; with several, a cluster that does not
	// answer does not hold the others back: it is recovered when its
	// informers sync, and is unavailable meanwhile.
	if err := m.syncClusters(ctx); err != nil {
		return false, nil // ctx ended before the first sync
	}
	if m.lease == nil {
		// One term for the Manager's life, from recovery on: servers
		// found starting are resumed as they are recovered, and calls
		// after ready find it leading.
		m.mu.Lock()
		m.setLeadingLocked(true)
		m.mu.Unlock()
	}
	m.recover(ctx, log)
	return true, nil
}

// acquireInformers takes, in every cluster, the pod informers of every
// namespace a server can be in, the profiles' included, so that
// recovery finds, and Stop reaches, a server a profile put elsewhere.
// r records each cluster's, for shutdown to release.
func (m *Manager) acquireInformers(ctx context.Context, r *runState) error {
	for _, c := range m.cells {
		namespaces, all, _ := c.factory.Namespaces()
		pods, err := acquirePods(ctx, c.registry, watchedNamespaces(namespaces, all))
		if err != nil {
			if c.name != "" {
				return fmt.Errorf("manager: cluster %q: %w", c.name, err)
			}
			return err
		}
		r.sets = append(r.sets, pods)
		c.mu.Lock()
		c.pods = pods
		c.mu.Unlock()
	}
	return nil
}

// shutdown gives back what Start's set-up acquired, whatever it reached:
// the pod observers first; then, once the Manager ran, it stops running,
// the queue shuts down and the workers end, and the servers' Spawners
// close; then the informers are released, and the watchers closed.
func (m *Manager) shutdown(r *runState) {
	for i := len(r.removes) - 1; i >= 0; i-- {
		r.removes[i]()
	}
	if r.running {
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
		m.queue.ShutDown()
		r.workers.Wait()
		for _, e := range m.entries() {
			e.sp.Close()
		}
	}
	for _, p := range r.sets {
		p.Release()
	}
	if r.running {
		m.closeWatchers()
	}
}

// startClusterWatch runs watchClusters in a goroutine of its own; stop
// ends it and returns once it has.
func (m *Manager) startClusterWatch(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.watchClusters(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// serve runs the terms (one for the Manager's life, or one per lease
// held) and the jittered resync, until ctx has ended and the last term
// with it, or leader election gives up (its error).
func (m *Manager) serve(ctx context.Context, log logr.Logger) error {
	// The goroutine ends once ctx has ended and the last term has.
	termsDone := make(chan error, 1)
	go func() {
		if m.lease == nil {
			m.lead(ctx, m.stopGrace())
			termsDone <- nil
			return
		}
		termsDone <- leader.Run(logr.NewContext(ctx, log), *m.lease, func(term context.Context) { m.lead(term, m.stopGrace()) })
	}()
	for {
		jitter := time.Duration(rand.Int64N(int64(m.opts.ResyncInterval)/10 + 1))
		select {
		case <-ctx.Done():
			return <-termsDone
		case err := <-termsDone:
			// ctx ended and the last term with it (this case can win the
			// select over ctx.Done), or leader election gave up (it
			// returns early only on an error).
			if err == nil || ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("manager: %w", err)
		case <-m.opts.Clock.After(m.opts.ResyncInterval + jitter):
			m.resync(ctx)
		}
	}
}

// checkVersions checks each cluster's API server version at Start. With
// one cluster, any failure is Start's error. With several, only a server
// too old is: a cluster that does not answer (within pingTimeout) is
// marked unavailable and checked by checkCluster once it answers, so
// that a restart while one cluster is away serves the others.
func (m *Manager) checkVersions(ctx context.Context, log logr.Logger) error {
	if !m.multi {
		c := m.cells[0]
		info, err := spawner.CheckServerVersion(ctx, c.client)
		if err != nil {
			return fmt.Errorf("manager: %w", err)
		}
		c.versionOK = true // before any goroutine reads it
		log.V(1).Info("API server", "version", info.GitVersion)
		return nil
	}
	errs := make([]error, len(m.cells))
	var wg sync.WaitGroup
	for i, c := range m.cells {
		wg.Go(func() { errs[i] = c.ping(ctx, log) })
	}
	wg.Wait()
	now := time.Now()
	for i, c := range m.cells {
		switch err := errs[i]; {
		case err == nil:
		case errors.Is(err, spawner.ErrServerTooOld):
			return fmt.Errorf("manager: %w", err)
		case ctx.Err() != nil:
			return context.Cause(ctx)
		default:
			log.Info("cluster not answering at start: unavailable until it does", "cluster", c.name, "error", err.Error())
			c.mu.Lock()
			c.badSince, c.down, c.downSince = now, true, now
			c.mu.Unlock()
			m.metrics.clusterUp(c.name, false)
		}
	}
	return nil
}

// syncClusters waits until the clusters' informers have synced. With one
// cluster it waits, bounded by ctx, as a Manager always has. With
// several, once one has synced the others get clusterSyncGrace: a cluster
// that has not synced by then is unavailable, and its servers are
// recovered from its informers' events once it syncs; a down cluster
// never holds the others back.
func (m *Manager) syncClusters(ctx context.Context) error {
	if !m.multi {
		return m.cells[0].podSet().WaitForSync(ctx)
	}
	synced := make(chan int, len(m.cells))
	var graceTimer *time.Timer
	waitCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The waits of clusters not synced yet end here (cancel first: wg
	// waits for them).
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i, c := range m.cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.podSet().WaitForSync(waitCtx) == nil {
				synced <- i
			}
		}()
	}
	// Awaited: every cluster but those that did not answer the version
	// check (they are unavailable already; their informers retry).
	awaited := 0
	for _, c := range m.cells {
		if down, _ := c.unavailable(); !down {
			awaited++
		}
	}
	first := true
	for n := 0; first || n < awaited; {
		var grace <-chan time.Time
		if !first {
			if graceTimer == nil {
				graceTimer = time.NewTimer(clusterSyncGrace)
				defer graceTimer.Stop()
			}
			grace = graceTimer.C
		}
		select {
		case i := <-synced:
			first = false
			if down, _ := m.cells[i].unavailable(); !down {
				n++
			}
		case <-grace:
			now := time.Now()
			for _, c := range m.cells {
				if !c.synced() {
					c.mu.Lock()
					c.badSince, c.down, c.downSince = now, true, now
					c.mu.Unlock()
					m.metrics.clusterUp(c.name, false)
				}
			}
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// clusterSyncGrace is how long Start waits, with several clusters, for
// the others once one cluster's informers have synced.
const clusterSyncGrace = 30 * time.Second

var errAlreadyStarted = errors.New("manager: a Manager runs once; create a new one")
