package manager

import (
	"context"

	"github.com/go-logr/logr"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// recover adopts every server recorded on a pod in the caches, then the
// seeded servers without a pod. With several clusters a server found in
// more than one is a split brain: reported, and left alone.
func (m *Manager) recover(ctx context.Context, log logr.Logger) {
	m.recovering.Store(true)
	defer m.recovering.Store(false)
	defer m.logRecovered(log)
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

// logRecovered says in one line what recovery found: the servers by
// phase (each server's own line is at V(1)).
func (m *Manager) logRecovered(log logr.Logger) {
	byPhase := map[Phase]int{}
	n := 0
	for _, e := range m.entries() {
		e.mu.Lock()
		byPhase[e.status.Phase]++
		e.mu.Unlock()
		n++
	}
	kv := []any{"servers", n}
	for _, p := range []Phase{PhaseRunning, PhaseStarting, PhaseStopping, PhaseStopped, PhaseFailed, PhaseUnknown} {
		if byPhase[p] > 0 {
			kv = append(kv, string(p), byPhase[p])
		}
	}
	log.Info("recovered the servers found in the cluster", kv...)
}

// recoverLate adopts the servers of a cluster whose informers synced
// after Start's recovery, as recover does: their pods came as informer
// events too, but the reconciles they asked for may not have run yet. A
// server known in another cluster is left to reconcile (a move, or a
// split brain).
func (m *Manager) recoverLate(ctx context.Context, c *cell, log logr.Logger) {
	list, err := c.podSet().List(ctx)
	if err != nil {
		log.Error(err, "listing cached pods for recovery", "cluster", c.name)
		return
	}
	for _, pod := range list {
		if !m.manages(c, pod) || !pod.Annotations.Has(naming.AnnotationUsername) {
			continue
		}
		key := serverKey{pod.Annotations.Get(naming.AnnotationUsername), pod.Annotations.Get(naming.AnnotationServername)}
		m.claims.set(key, c, pod, false)
		if pod.DeletionTimestamp != nil || !m.trusted(c, pod) {
			continue
		}
		if err := m.adopt(ctx, c, pod); err != nil {
			log.Error(err, "recovering a server", "cluster", c.name, "pod", pod.Namespace+"/"+pod.Name)
		}
	}
	log.Info("cluster recovered after Start", "cluster", c.name, "pods", len(list))
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
