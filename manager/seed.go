package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// Seed gives the Manager the State a hub saved for a server (its
// database: what State and Status report, which the JupyterHub Spawner
// keeps), for a server the Manager may not know: after the Manager or
// the hub restarted, under a changed configuration. It returns the
// server's status once seeded, as Status would.
//
// The hub's State is trusted as Options.Seed is, after these checks:
//
//   - a server the Manager knows keeps what it knows: a pod's record
//     wins over the hub's State (it is what runs); the State only adds
//     the claim in use (PVCName) to a server without a pod, or on a pod
//     that records no State at the State's names (KubeSpawner's, whose
//     claim only KubeSpawner's state, pvc_name, names);
//   - otherwise the State's namespace must be one the configuration
//     trusts for the server (spawner.Factory.TrustsNamespace: its own,
//     a profile's, or one retired_namespaces names) and its cluster one
//     the Manager runs (a retired one included): else it is
//     ErrStateRefused naming the option that would keep it trusted;
//   - a pod at the State's names is adopted when it is one the Manager
//     manages (spawnkit's, or KubeSpawner's with AdoptKubeSpawner) and
//     its owner annotations name this server
//     (spawner.Factory.CheckPlacement with the State); any other pod
//     there is ErrStateRefused and untouched;
//   - with no pod there, the server is stopped, with the State's names
//     and claim (a cluster not looked at since Start may still hold it:
//     until then it is unknown, as any seeded server).
//
// A State without a pod name (a hub's saved claim name only, or none)
// refuses nothing. Seed is safe to call at any time and as often as a
// hub likes; a refusal is also logged.
func (m *Manager) Seed(ctx context.Context, sd Seed) (Status, error) {
	if err := m.waitReady(ctx); err != nil {
		return Status{}, err
	}
	e, err := m.seedOne(ctx, sd)
	if err != nil {
		m.mu.Lock()
		log := m.log
		m.mu.Unlock()
		log.Info("refusing a hub's state", "user", sd.Server.Username, "server", sd.Server.Servername,
			"namespace", sd.State.Namespace, "pod", sd.State.PodName, "cluster", sd.State.Cluster, "reason", err.Error())
		return Status{}, err
	}
	if e == nil {
		return m.Status(sd.Server)
	}
	return m.statusOf(e), nil
}

// seedOne seeds one server (see Seed) and returns its entry; nil when
// the State names nothing and the Manager does not know the server.
func (m *Manager) seedOne(ctx context.Context, sd Seed) (*entry, error) {
	srv, st := sd.Server, sd.State
	if e := m.lookup(srv); e != nil {
		m.seedKnown(ctx, e, st)
		return e, nil
	}
	if st.PodName == "" || st.Namespace == "" {
		if st.PVCName == "" {
			return nil, nil
		}
		// The claim in use only: a stopped server's (the hub keeps it
		// across stops, as KubeSpawner keeps pvc_name).
		e, err := m.entryFor(srv, m.cells[0])
		if err != nil {
			return nil, err
		}
		m.seedKnown(ctx, e, st)
		return e, nil
	}
	c := m.cells[0]
	if st.Cluster == "" && m.multi {
		// A State saved with one cluster names none: the server may be
		// in any; until every cluster has been looked at, it is as
		// unknown as before the State came.
		if err := m.unknown(srv); !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	if st.Cluster != "" {
		var ok bool
		if c, ok = m.byName[st.Cluster]; !ok {
			return nil, fmt.Errorf("%w: server %q of user %q is recorded in cluster %q, which the Manager does not run (a cluster removed while servers run there stays listed, marked retired, until they stop): %w",
				ErrStateRefused, srv.Servername, srv.Username, st.Cluster, ErrNoSuchCluster)
		}
	}
	if !c.factory.TrustsNamespace(srv, st.Namespace) {
		where := ""
		if c.name != "" {
			where = fmt.Sprintf(" in cluster %q", c.name)
		}
		return nil, fmt.Errorf("%w: server %q of user %q is recorded in namespace %q, which the configuration%s does not trust for it (a namespace that held servers before a configuration change belongs in retired_namespaces)",
			ErrStateRefused, srv.Servername, srv.Username, st.Namespace, where)
	}
	if c.synced() {
		pod, ok, err := c.podSet().Get(ctx, st.Namespace, st.PodName)
		if err != nil {
			return nil, err
		}
		if ok && pod.DeletionTimestamp == nil {
			if !m.manages(c, pod) {
				return nil, fmt.Errorf("%w: the hub records server %q of user %q as pod %s/%s, which is not a pod the Manager manages (KubeSpawner's are adopted only with AdoptKubeSpawner: the spawner-service's -adopt-kubespawner)",
					ErrStateRefused, srv.Servername, srv.Username, pod.Namespace, pod.Name)
			}
			if err := checkSeededPod(c, srv, pod, &st); err != nil {
				return nil, err
			}
			if err := m.adopt(ctx, c, pod); err != nil {
				return nil, err
			}
			e := m.lookup(srv)
			if e != nil {
				m.seedKnown(ctx, e, st)
			}
			return e, nil
		}
	}
	e, err := m.entryFor(srv, c)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.op != nil || e.cell != c || e.status.Phase != PhaseStopped || e.status.StartedAt != nil {
		// Made meanwhile by a Spawn (or found by recovery): what it
		// knows wins.
		return e, nil
	}
	e.sp.LoadState(st)
	e.status.State = e.sp.State()
	c.mu.Lock()
	// A cluster recovered already has no pod of it: stopped, as seeded.
	// One not seen yet may have.
	e.seeded = !c.recovered
	c.mu.Unlock()
	return e, nil
}

// seedKnown applies a hub's State to a server the Manager knows: only its
// claim name, and only to a server that records none, when the server is
// stopped or failed (its pod is gone), or runs on a pod that records no
// State at the hub's State's names (KubeSpawner's, adopted with
// AdoptKubeSpawner: the claim is KubeSpawner's pvc_name, which its pod
// does not record). The names a pod records are never replaced by the
// hub's.
func (m *Manager) seedKnown(ctx context.Context, e *entry, st spawner.State) {
	if st.PVCName == "" {
		return
	}
	e.mu.Lock()
	c, cur := e.cell, e.sp.State()
	idle := e.op == nil && (e.status.Phase == PhaseStopped || e.status.Phase == PhaseFailed)
	e.mu.Unlock()
	if cur.PVCName != "" {
		return // the server's own start found (or made) its claim
	}
	if !idle && !(st.PodName == cur.PodName && st.Namespace == cur.Namespace && recordsNoState(ctx, c, cur)) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.sp.State()
	if e.cell != c || now.PVCName != "" || now.PodName != cur.PodName || now.Namespace != cur.Namespace || now.StartID != cur.StartID {
		return // changed meanwhile: what it knows now wins
	}
	switch idleNow := e.op == nil && (e.status.Phase == PhaseStopped || e.status.Phase == PhaseFailed); {
	case idle && !idleNow:
		return // a start plans with its own state, a deletion with its own
	case !idle && e.op != nil && (e.op.kind == opStart || e.op.kind == opDelete):
		return
	}
	cur = now
	cur.PVCName = st.PVCName
	e.sp.LoadState(cur)
	e.status.State = e.sp.State()
}

// recordsNoState reports whether the pod at st's names, in c's cache, is
// one without a State record (KubeSpawner's).
func recordsNoState(ctx context.Context, c *cell, st spawner.State) bool {
	if st.PodName == "" || c.podSet() == nil {
		return false
	}
	pod, ok, err := c.podSet().Get(ctx, st.Namespace, st.PodName)
	if err != nil || !ok {
		return false
	}
	_, recorded := spawner.StateFromPod(pod)
	return !recorded
}

// checkSeededPod is nil when pod, found at the names of a hub's State,
// is server's: its owner annotations name it and it is where the
// configuration trusts it (with the State's names).
func checkSeededPod(c *cell, srv naming.Server, pod *reflector.Pod, st *spawner.State) error {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	if !ok || user != srv.Username || pod.Annotations.Get(naming.AnnotationServername) != srv.Servername {
		return fmt.Errorf("%w: the hub records server %q of user %q as pod %s/%s, but that pod is not that server's (its owner annotations name user %q, server %q)",
			ErrStateRefused, srv.Servername, srv.Username, pod.Namespace, pod.Name, user, pod.Annotations.Get(naming.AnnotationServername))
	}
	if err := c.factory.CheckPlacement(srv, pod, st); err != nil {
		return fmt.Errorf("%w: %w", ErrStateRefused, err)
	}
	return nil
}
