package manager

import (
	"context"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

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

// maxUntrustedSeen bounds the pods remembered as reported untrusted.
const maxUntrustedSeen = 10000
