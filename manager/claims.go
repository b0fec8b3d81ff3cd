package manager

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// claimIndex records, with several clusters, which clusters hold a pod
// claiming each server (its owner annotations, by spawnkit or an adopted
// KubeSpawner), terminating ones included until they are gone: the
// one-server-one-cluster check of Spawn and reconcile.
// It is a hint kept from pod events; what it names is checked against
// the cluster's cache (and the trust rules) before anything acts on it.
type claimIndex struct {
	mu sync.Mutex
	m  map[serverKey]map[*cell]podName
}

type podName struct{ namespace, name string }

func (x *claimIndex) init() { x.m = map[serverKey]map[*cell]podName{} }

func (x *claimIndex) set(key serverKey, c *cell, pod *reflector.Pod, gone bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	cells := x.m[key]
	if gone {
		if cur, ok := cells[c]; ok && cur == (podName{pod.Namespace, pod.Name}) {
			delete(cells, c)
			if len(cells) == 0 {
				delete(x.m, key)
			}
		}
		return
	}
	if cells == nil {
		cells = map[*cell]podName{}
		x.m[key] = cells
	}
	cells[c] = podName{pod.Namespace, pod.Name}
}

func (x *claimIndex) of(key serverKey) map[*cell]podName {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.m[key]) == 0 {
		return nil
	}
	out := make(map[*cell]podName, len(x.m[key]))
	for c, p := range x.m[key] {
		out[c] = p
	}
	return out
}

// claimed is a server's pod found in one cluster.
type claimed struct {
	cell *cell
	pod  *reflector.Pod
}

// podsOf are the pods that claim key in each cluster, checked against
// each cluster's cache and trust rules (in the clusters' order). With one
// cluster it is that cluster's pod, if any. Terminating pods count only
// with terminating: a pod on its way out is no second copy of a server
// (reconcile follows the one left), but while it exists the server is
// still in that cluster (its containers may be running, its claim in
// use), so no start elsewhere may begin.
func (m *Manager) podsOf(ctx context.Context, key serverKey, terminating bool) ([]claimed, error) {
	if !m.multi {
		pod, err := m.findPod(ctx, m.cells[0], key)
		if err != nil || pod == nil {
			return nil, err
		}
		return []claimed{{m.cells[0], pod}}, nil
	}
	var out []claimed
	for c, ref := range m.claims.of(key) {
		pods := c.podSet()
		if pods == nil {
			continue
		}
		pod, ok, err := pods.Get(ctx, ref.namespace, ref.name)
		if err != nil {
			return nil, err
		}
		if !ok || (pod.DeletionTimestamp != nil && !terminating) || !m.manages(c, pod) || !m.claimsServer(pod, key) || !m.trusted(c, pod) {
			continue
		}
		out = append(out, claimed{c, pod})
	}
	sort.Slice(out, func(i, j int) bool { return m.cellIndex(out[i].cell) < m.cellIndex(out[j].cell) })
	return out, nil
}

func (m *Manager) cellIndex(c *cell) int { return slices.Index(m.cells, c) }

func (m *Manager) claimsServer(pod *reflector.Pod, key serverKey) bool {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	return ok && user == key.user && pod.Annotations.Get(naming.AnnotationServername) == key.server
}

// describeClaims names each cluster's pod of a split-brain server.
func describeClaims(key serverKey, found []claimed) string {
	parts := make([]string, len(found))
	for i, f := range found {
		parts[i] = fmt.Sprintf("cluster %q (pod %s/%s, uid %s)", f.cell.name, f.pod.Namespace, f.pod.Name, f.pod.UID)
	}
	return fmt.Sprintf("server %q of user %q is in %d clusters at once: %s; the Manager touches none of them: delete the pods that should not run, and it follows the one left",
		key.server, key.user, len(found), strings.Join(parts, ", "))
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

// moveLocked makes e a server of cluster c (e.mu held, e idle): a new
// Spawner of c's Factory, with the names the old one used only when the
// state is loaded afterwards. The old Spawner is closed.
func (m *Manager) moveLocked(e *entry, c *cell, s naming.Server, sp *spawner.Spawner) error {
	if e.cell == c {
		return nil
	}
	if sp == nil {
		var err error
		if sp, err = c.factory.New(s); err != nil {
			return err
		}
	}
	old := e.sp
	m.log.Info("server moves cluster", "user", e.key.user, "server", e.key.server, "from", e.cell.name, "to", c.name)
	e.cell, e.sp = c, sp
	e.status.State = sp.State()
	old.Close()
	return nil
}

// checkElsewhere is ErrBusy, naming the pod, while server s has a pod
// in another cluster than target, terminating ones included: one
// server, one cluster (a stopped server's pod kept, one still shutting
// down after a Stop, a start of another hub). Spawn checks it, and a
// start checks it again once it has its slot, just before it creates
// anything: a pod may have appeared while it waited. (Across clusters
// nothing is atomic: a pod made elsewhere after that check is a split
// brain, which reconcile reports and leaves alone.)
func (m *Manager) checkElsewhere(ctx context.Context, s naming.Server, target *cell) error {
	if !m.multi {
		return nil
	}
	found, err := m.podsOf(ctx, keyOf(s), true)
	if err != nil {
		return err
	}
	for _, f := range found {
		if f.cell == target {
			continue
		}
		what := "still has"
		if f.pod.DeletionTimestamp != nil {
			what = "still has a terminating"
		}
		return fmt.Errorf("%w: server %q of user %q %s pod %s/%s in cluster %q: stop it there (or let it go) before it starts in cluster %q",
			ErrBusy, s.Servername, s.Username, what, f.pod.Namespace, f.pod.Name, f.cell.name, target.name)
	}
	return nil
}
