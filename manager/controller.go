package manager

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/spawnkit/spawnkit/internal/leader"
	"github.com/spawnkit/spawnkit/naming"
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
	// Once per cluster, before any watch: a server older than spawnkit
	// supports is refused with its version rather than misbehaving
	// later.
	if err := m.checkVersions(ctx, log); err != nil {
		close(m.ready)
		return err
	}
	if m.lease != nil {
		if err := leader.Check(ctx, *m.lease); err != nil {
			m.observeLease(err)
			close(m.ready)
			return fmt.Errorf("manager: %w", err)
		}
	}
	// Every namespace a server can be in, the profiles' included, so
	// that recovery finds, and Stop reaches, a server a profile put
	// elsewhere; in every cluster.
	var sets []*podSet
	releaseAll := func() {
		for _, p := range sets {
			p.Release()
		}
	}
	for _, c := range m.cells {
		namespaces, all, _ := c.factory.Namespaces()
		pods, err := acquirePods(ctx, c.registry, watchedNamespaces(namespaces, all))
		if err != nil {
			releaseAll()
			close(m.ready)
			if c.name != "" {
				return fmt.Errorf("manager: cluster %q: %w", c.name, err)
			}
			return err
		}
		sets = append(sets, pods)
		c.mu.Lock()
		c.pods = pods
		c.mu.Unlock()
	}
	m.mu.Lock()
	m.log = log
	m.running, m.ran = true, true
	m.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[serverKey](),
		workqueue.TypedRateLimitingQueueConfig[serverKey]{Name: "spawnkit-manager"})
	m.mu.Unlock()

	var workers sync.WaitGroup
	defer func() {
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
		m.queue.ShutDown()
		workers.Wait()
		for _, e := range m.entries() {
			e.sp.Close()
		}
		releaseAll()
		m.closeWatchers()
	}()

	// Observe, not OnChange: no replay is needed (recover reads the cache
	// once it has synced, after this), and a client-go listener of its
	// own would cost two goroutine hand-offs for every pod change.
	for _, c := range m.cells {
		remove, err := c.pods.Observe(func(pod *reflector.Pod, deleted bool) { m.podChanged(c, pod, deleted) })
		if err != nil {
			close(m.ready)
			return err
		}
		defer remove()
	}
	// The clusters sync at once; with several, a cluster that does not
	// answer does not hold the others back: it is recovered when its
	// informers sync, and is unavailable meanwhile.
	if err := m.syncClusters(ctx); err != nil {
		close(m.ready)
		return nil // ctx ended before the first sync
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
	close(m.ready)
	var health sync.WaitGroup
	if m.multi {
		healthCtx, stopHealth := context.WithCancel(ctx)
		health.Add(1)
		go func() {
			defer health.Done()
			m.watchClusters(healthCtx)
		}()
		defer health.Wait()
		defer stopHealth()
	}
	for range m.opts.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for m.processNext(ctx, log) {
			}
		}()
	}

	// The terms: one for the Manager's life, or one per lease held. The
	// goroutine ends once ctx has ended and the last term has.
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

// podChanged enqueues the server a pod belongs to. It runs in the
// Registry's pod handler (Pods.Observe), which also wakes the starts'
// subscriptions, so it must not block: it reads the pod's labels and
// annotations and takes the Manager's and the entry's locks briefly
// (nothing holds them while waiting on the Registry).
//
// A server whose start (or resume) is in flight is not enqueued, unless
// its pod is unschedulable: the start owns the phase and follows the pod
// itself, so a reconcile could only check UnschedulableTimeout (observe),
// and it would cost a worker's wake-up for each of the pod's updates
// while it starts. runStart enqueues the server when the start ends, so
// a change the start did not see (the pod ended just after it was ready)
// is reconciled then, from the cache; it does not when no version after
// the one the start found ready has come by, and podChanged then lets
// that version pass too: a successful spawn costs no reconcile.
func (m *Manager) podChanged(c *cell, pod *reflector.Pod, deleted bool) {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	if !ok || !m.manages(c, pod) {
		return
	}
	if deleted {
		m.untrustedMu.Lock()
		delete(m.untrustedSeen, pod.UID)
		m.untrustedMu.Unlock()
	}
	key := serverKey{user, pod.Annotations.Get(naming.AnnotationServername)}
	if m.multi {
		m.claims.set(key, c, pod, deleted)
	}
	m.mu.Lock()
	q, e := m.queue, m.servers[key]
	m.mu.Unlock()
	if q == nil {
		return
	}
	if e != nil {
		e.mu.Lock()
		// A pod in another cluster than the server's is always looked
		// at: it may be a second copy (split brain) or where it moved.
		starting := e.op != nil && e.op.kind.starts() && e.cell == c
		// The version a start found ready, coming after the start ended:
		// the phase was set from it, a reconcile would find nothing. (A
		// deletion is never that: a relist's tombstone carries the last
		// version the cache held.)
		settled := !deleted && e.op == nil && e.readyVersion != "" && pod.ResourceVersion == e.readyVersion &&
			e.status.Phase == PhaseRunning
		e.mu.Unlock()
		if (starting && !unschedulable(pod)) || settled {
			return
		}
	}
	q.Add(key)
}

// enqueue asks the workers to reconcile a server.
func (m *Manager) enqueue(key serverKey) {
	m.mu.Lock()
	q := m.queue
	m.mu.Unlock()
	if q != nil {
		q.Add(key)
	}
}

// unschedulable reports whether the scheduler found no node for pod.
func unschedulable(pod *reflector.Pod) bool {
	return pod.Scheduled.Status == corev1.ConditionFalse && pod.Scheduled.Reason == corev1.PodReasonUnschedulable
}

func (m *Manager) processNext(ctx context.Context, log logr.Logger) bool {
	key, quit := m.queue.Get()
	if quit {
		return false
	}
	m.busy.Add(1)
	m.lastTurn.Store(m.opts.Clock.Now().UnixNano())
	defer func() {
		m.lastTurn.Store(m.opts.Clock.Now().UnixNano())
		m.busy.Add(-1)
		m.queue.Done(key)
	}()
	if err := m.reconcile(ctx, key); err != nil && ctx.Err() == nil {
		log.Error(err, "reconciling server", "user", key.user, "server", key.server)
		m.queue.AddRateLimited(key)
		return true
	}
	m.queue.Forget(key)
	return true
}

// reconcile brings one server's phase in line with its pod in the cache,
// adopting servers the Manager does not know yet.
func (m *Manager) reconcile(ctx context.Context, key serverKey) error {
	m.reconciles.Add(1)
	m.mu.Lock()
	e := m.servers[key]
	m.mu.Unlock()
	if !m.multi {
		if e == nil {
			pod, err := m.findPod(ctx, m.cells[0], key)
			if err != nil || pod == nil {
				return err
			}
			return m.adopt(ctx, m.cells[0], pod)
		}
		return m.observe(ctx, e)
	}
	found, err := m.podsOf(ctx, key, false)
	if err != nil {
		return err
	}
	switch {
	case len(found) > 1:
		return m.splitBrain(key, found)
	case e == nil && len(found) == 1:
		return m.adopt(ctx, found[0].cell, found[0].pod)
	case e == nil:
		return nil
	}
	e.mu.Lock()
	wasSplit := e.splitBrain != ""
	e.splitBrain = ""
	if len(found) == 1 && found[0].cell != e.cell && e.op == nil {
		// Its only pod is in another cluster than the Manager thought
		// (moved by the operator, restored, or what a split brain left).
		srv := naming.Server{Username: key.user, Servername: key.server, UserID: e.status.State.UserID}
		if err := m.moveLocked(e, found[0].cell, srv, nil); err != nil {
			e.mu.Unlock()
			return err
		}
		e.status.Phase = PhaseStopped // so that adopt loads the pod's record
	}
	if wasSplit {
		m.notify(m.viewLocked(e))
	}
	// An operation in flight in the server's own cluster (a start
	// waiting for its slot, a stop) while its only pod is elsewhere: the
	// operation owns the entry, and its end reconciles the server again
	// (a start checks for that pod before it creates anything). Adopting
	// now would only ask for this reconcile again, at once.
	away := len(found) == 1 && found[0].cell != e.cell
	e.mu.Unlock()
	switch {
	case away:
		return nil
	case len(found) == 1:
		return m.adopt(ctx, found[0].cell, found[0].pod)
	}
	return m.observe(ctx, e)
}

// splitBrain records that a server has pods in several clusters: its
// status says where (PhaseUnknown, ReasonSplitBrain), calls that would
// change it are ErrSplitBrain, and nothing of it is touched. It is
// logged once per change of what was found.
func (m *Manager) splitBrain(key serverKey, found []claimed) error {
	msg := describeClaims(key, found)
	srv := naming.Server{Username: key.user, Servername: key.server}
	e, err := m.entryFor(srv, found[0].cell)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.splitBrain == msg {
		return nil
	}
	e.splitBrain = msg
	m.metrics.splitBrains.Inc()
	m.log.Info("server found in several clusters; touching none", "user", key.user, "server", key.server, "detail", msg)
	m.notify(m.viewLocked(e))
	return nil
}

// manages reports whether a pod is a server pod the Manager adopts:
// spawnkit's own, and with AdoptKubeSpawner KubeSpawner's single-user
// server pods. It only reads labels.
func (m *Manager) manages(c *cell, pod *reflector.Pod) bool {
	switch pod.Labels.Get(naming.LabelManagedBy) {
	case naming.ManagedBySpawnkit:
		return true
	case naming.ManagedByKubeSpawner:
		return m.opts.AdoptKubeSpawner && pod.Labels.Get(naming.LabelComponent) == c.cfg.ComponentLabel
	}
	return false
}

// kubeSpawnerState is the State of a pod KubeSpawner made (it records
// none): its names, and the port of its notebook-port container port.
func kubeSpawnerState(pod *reflector.Pod) spawner.State {
	st := spawner.State{PodName: pod.Name, Namespace: pod.Namespace}
	for _, p := range pod.Ports {
		if p.Name == "notebook-port" {
			st.Port = p.ContainerPort
			break
		}
	}
	return st
}

// findPod finds a server's pod in the cache by its owner annotations,
// among the pods where the configuration puts it (trusted): a pod
// elsewhere that claims the server is reported, and never hides the
// server's own.
func (m *Manager) findPod(ctx context.Context, c *cell, key serverKey) (*reflector.Pod, error) {
	list, err := c.podSet().List(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		if user, ok := p.Annotations.Lookup(naming.AnnotationUsername); ok && user == key.user &&
			p.Annotations.Get(naming.AnnotationServername) == key.server && m.manages(c, p) && p.DeletionTimestamp == nil &&
			m.trusted(c, p) {
			return p, nil
		}
	}
	return nil, nil
}

// trusted reports whether a pod that claims a server (its owner
// annotations) is where the configuration puts that server's pod
// (spawner.Factory.CheckPlacement): ownership is (namespace, user,
// server), because anyone who can create a pod in some namespace can
// write any annotations on it. A pod that is not is never adopted; it is
// counted and logged once (by UID), naming it.
func (m *Manager) trusted(c *cell, pod *reflector.Pod) bool {
	srv := naming.Server{Username: pod.Annotations.Get(naming.AnnotationUsername), Servername: pod.Annotations.Get(naming.AnnotationServername)}
	err := c.factory.CheckPlacement(srv, pod, nil)
	if err == nil {
		return true
	}
	m.untrustedMu.Lock()
	_, seen := m.untrustedSeen[pod.UID]
	if !seen {
		if len(m.untrustedSeen) >= maxUntrustedSeen {
			clear(m.untrustedSeen) // a flood of planted pods is reported again, never held forever
		}
		m.untrustedSeen[pod.UID] = struct{}{}
	}
	m.untrustedMu.Unlock()
	if seen {
		return false
	}
	m.metrics.untrusted.Inc()
	m.mu.Lock()
	log := m.log
	m.mu.Unlock()
	log.Info("ignoring a pod that claims a server but is not where its configuration puts it",
		"cluster", c.name, "pod", pod.Namespace+"/"+pod.Name, "uid", string(pod.UID), "user", srv.Username, "server", srv.Servername, "reason", err.Error())
	return false
}

// recover adopts every server recorded on a pod in the caches, then the
// seeded servers without a pod. With several clusters a server found in
// more than one is a split brain: reported, and left alone.
func (m *Manager) recover(ctx context.Context, log logr.Logger) {
	type found struct {
		c   *cell
		pod *reflector.Pod
	}
	var pods []found
	byKey := map[serverKey][]claimed{}
	for _, c := range m.cells {
		if !c.synced() {
			continue // recovered from its events once it syncs (checkCluster)
		}
		c.mu.Lock()
		c.recovered = true
		c.mu.Unlock()
		list, err := c.podSet().List(ctx)
		if err != nil {
			log.Error(err, "listing cached pods for recovery", "cluster", c.name)
		}
		for _, pod := range list {
			if !m.manages(c, pod) || !pod.Annotations.Has(naming.AnnotationUsername) {
				continue
			}
			key := serverKey{pod.Annotations.Get(naming.AnnotationUsername), pod.Annotations.Get(naming.AnnotationServername)}
			if m.multi {
				// Terminating pods too: a start elsewhere waits for them.
				m.claims.set(key, c, pod, false)
			}
			if pod.DeletionTimestamp != nil || !m.trusted(c, pod) {
				continue
			}
			pods = append(pods, found{c, pod})
			if m.multi {
				byKey[key] = append(byKey[key], claimed{c, pod})
			}
		}
	}
	for _, f := range pods {
		if m.multi {
			key := serverKey{f.pod.Annotations.Get(naming.AnnotationUsername), f.pod.Annotations.Get(naming.AnnotationServername)}
			if claims := byKey[key]; len(claims) > 1 {
				if claims[0].pod == f.pod {
					if err := m.splitBrain(key, claims); err != nil {
						log.Error(err, "recovering a server", "cluster", f.c.name, "pod", f.pod.Namespace+"/"+f.pod.Name)
					}
				}
				continue
			}
		}
		if err := m.adopt(ctx, f.c, f.pod); err != nil {
			log.Error(err, "recovering a server", "cluster", f.c.name, "pod", f.pod.Namespace+"/"+f.pod.Name)
		}
	}
	for _, sd := range m.opts.Seed {
		if _, err := m.seedOne(ctx, sd); err != nil {
			log.Error(err, "seeding a server", "user", sd.Server.Username, "server", sd.Server.Servername)
		}
	}
}

// adopt makes the server of a pod found in the cluster a managed server
// and observes it. Everything it reads (owner annotations, the recorded
// State, a KubeSpawner pod's notebook port) is in the cached pod.
func (m *Manager) adopt(ctx context.Context, c *cell, pod *reflector.Pod) error {
	srv := naming.Server{Username: pod.Annotations.Get(naming.AnnotationUsername), Servername: pod.Annotations.Get(naming.AnnotationServername)}
	rec, ok := spawner.StateFromPod(pod)
	if ok {
		srv.UserID = rec.UserID
	} else {
		rec = kubeSpawnerState(pod)
	}
	e, err := m.entryFor(srv, c)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.cell != c {
		// The server is known in another cluster: reconcile decides
		// (a move, or a split brain).
		e.mu.Unlock()
		m.enqueue(e.key)
		return nil
	}
	if e.op == nil && (e.status.Phase == PhaseStopped || e.status.Phase == PhaseFailed) {
		e.sp.LoadState(rec)
		e.status.State = e.sp.State()
		if e.status.StartedAt == nil {
			t := pod.CreationTimestamp.Time
			e.status.StartedAt = &t
		}
	}
	e.mu.Unlock()
	return m.observe(ctx, e)
}

// observe polls one server's pod from the cache and applies what it
// finds, unless an operation in flight owns the phase: a running server
// whose pod exited, ended, was evicted or deleted becomes failed (or
// stopped, for exit code 0); a pod found running makes the server
// running, and one found starting is resumed (when leading).
func (m *Manager) observe(ctx context.Context, e *entry) error {
	e.mu.Lock()
	if op := e.op; op != nil {
		e.mu.Unlock()
		if op.kind.starts() {
			m.checkUnschedulable(ctx, e, op)
		}
		return nil
	}
	sp := e.sp
	e.mu.Unlock()
	st, err := sp.PollCache(ctx)
	if err != nil {
		if errors.Is(err, spawner.ErrClosed) {
			return nil
		}
		return err
	}
	m.apply(ctx, e, st, sp)
	if !st.Running && st.Phase != "" {
		// The pod exited: now (a hub watching for failures learns of it
		// without waiting for an API call) Poll deletes it, with
		// delete_stopped_pods.
		if _, err := sp.Poll(ctx); err != nil && !errors.Is(err, spawner.ErrClosed) {
			return err
		}
	}
	return nil
}

// apply records what a poll found, unless an operation began meanwhile.
func (m *Manager) apply(ctx context.Context, e *entry, st spawner.Status, sp *spawner.Spawner) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.op != nil {
		return // an operation began meanwhile and owns the phase
	}
	if e.seeded {
		// The cluster's cache has been looked at: the phase below is
		// what it holds, no longer a guess.
		e.seeded = false
		defer func() { m.notify(m.viewLocked(e)) }()
	}
	phase := e.status.Phase
	switch {
	case st.Running && st.Ready:
		if phase != PhaseRunning || e.status.URL != st.URL {
			e.status.URL, e.status.ExitCode, e.status.Reason, e.status.Message = st.URL, nil, "", ""
			if e.status.ReadyAt == nil && !st.ReadySince.IsZero() {
				t := st.ReadySince
				e.status.ReadyAt = &t
			}
			m.setPhaseLocked(e, PhaseRunning)
		}
	case st.Running:
		// Pending, or running but not ready.
		if phase == PhaseRunning {
			return // a container restarting: still the same server
		}
		if phase == PhaseStopping || st.Deleting {
			return // a pod on its way out is never resumed
		}
		e.status.ExitCode, e.status.Reason, e.status.Message = nil, "", ""
		op, opCtx := m.beginOpLocked(ctx, e, opResume)
		if op == nil {
			// A standby, or a term ending: the leader resumes it.
			m.setPhaseLocked(e, PhaseStarting)
			return
		}
		stream := spawner.NewStream()
		e.stream = stream
		stream.Publish(spawner.ProgressEvent{Message: "Found the server starting; following it.", Time: m.opts.Clock.Now()})
		m.setPhaseLocked(e, PhaseStarting)
		go m.runStart(opCtx, e, op, e.cell.name, sp, stream, func(ctx context.Context) (string, error) {
			return sp.Resume(ctx, spawner.StartOptions{Progress: stream})
		})
	default:
		if phase == PhaseRunning || phase == PhaseStarting {
			e.status.ExitCode = intPtr(st.ExitCode)
			e.status.URL, e.status.Reason, e.status.Message = "", st.Reason, st.Message
			m.metrics.failures.WithLabelValues(string(st.Reason), e.cell.name).Inc()
			if st.ExitCode == 0 && st.Reason == spawner.ReasonExited {
				m.setPhaseLocked(e, PhaseStopped)
			} else {
				m.setPhaseLocked(e, PhaseFailed)
			}
		}
	}
}

// checkUnschedulable ends a start whose pod has been unschedulable for
// longer than UnschedulableTimeout.
func (m *Manager) checkUnschedulable(ctx context.Context, e *entry, op *operation) {
	limit := m.opts.UnschedulableTimeout
	if limit <= 0 {
		return
	}
	st := e.sp.State()
	e.mu.Lock()
	c := e.cell
	e.mu.Unlock()
	pod, ok, err := c.podSet().Get(ctx, st.Namespace, st.PodName)
	if err != nil || !ok {
		return
	}
	if c := pod.Scheduled; unschedulable(pod) {
		since := m.opts.Clock.Since(c.LastTransitionTime.Time)
		if since >= limit {
			op.cancel(fmt.Errorf("%w (%s): %s", ErrUnschedulable, limit, c.Message))
			return
		}
		m.queue.AddAfter(e.key, limit-since)
	}
}

// resync enqueues every known server (a backstop for missed events) and
// forgets stopped and failed servers older than Retention. It reads only
// the cache.
func (m *Manager) resync(ctx context.Context) {
	now := m.opts.Clock.Now()
	for _, e := range m.entries() {
		e.mu.Lock()
		idle := e.op == nil && (e.status.Phase == PhaseStopped || e.status.Phase == PhaseFailed)
		old := now.Sub(e.changed) >= m.opts.Retention
		e.mu.Unlock()
		if idle && old {
			m.forget(e, false)
			continue
		}
		m.queue.Add(e.key)
	}
	for _, c := range m.cells {
		if pods, err := c.podSet().List(ctx); err == nil {
			for _, p := range pods {
				m.podChanged(c, p, false)
			}
		}
	}
	m.resyncs.Add(1)
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

// clusterSyncGrace is how long Start waits, with several clusters, for
// the others once one cluster's informers have synced.
const clusterSyncGrace = 30 * time.Second
