package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// ClusterHealth is one cluster's condition, as Health reports it.
type ClusterHealth struct {
	Name string
	// Pods is the health of the Manager's pod informers in the cluster.
	Pods reflector.Status
	// Unavailable is set while the cluster's informers have failed
	// without a success for longer than Options.ClusterDownAfter: its
	// servers are reported PhaseUnknown, and starts and stops there fail
	// with ErrClusterUnavailable. Since is when it began.
	Unavailable bool
	Since       time.Time
	// Refused is set when the cluster's API server is older than
	// spawnkit supports (wrapping spawner.ErrServerTooOld): the cluster
	// stays unavailable.
	Refused error
	// Servers counts the servers the Manager knows in the cluster.
	Servers int
	// Retired is Cluster.Retired: no start goes there.
	Retired bool
}

// Err is why the cluster is unavailable, or nil.
func (h ClusterHealth) Err() error {
	if !h.Unavailable {
		return nil
	}
	err := h.Pods.LastError
	if h.Refused != nil {
		err = h.Refused
	}
	return &ClusterUnavailableError{Cluster: h.Name, Since: h.Since, Err: err}
}

// ClusterUnavailableError is a call refused because the server's cluster
// (or, for a start, every cluster it may go to) is unavailable. It wraps
// ErrClusterUnavailable.
type ClusterUnavailableError struct {
	Cluster string
	Since   time.Time
	Err     error // the informers' last error, if any
}

func (e *ClusterUnavailableError) Error() string {
	msg := fmt.Sprintf("manager: cluster %q is unavailable: its API server has not answered since %s", e.Cluster, e.Since.UTC().Format(time.RFC3339))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *ClusterUnavailableError) Unwrap() []error { return []error{ErrClusterUnavailable, e.Err} }

// clusterHealth is every cluster's health, the default first.
func (m *Manager) clusterHealth() []ClusterHealth {
	counts := map[*cell]int{}
	for _, e := range m.entries() {
		e.mu.Lock()
		counts[e.cell]++
		e.mu.Unlock()
	}
	out := make([]ClusterHealth, len(m.cells))
	for i, c := range m.cells {
		out[i] = c.health()
		out[i].Servers = counts[c]
	}
	return out
}

// health is the cell's ClusterHealth (Servers not counted).
func (c *cell) health() ClusterHealth {
	c.mu.Lock()
	pods, down, since, tooOld := c.pods, c.down, c.downSince, c.tooOld
	c.mu.Unlock()
	h := ClusterHealth{Name: c.name, Unavailable: down, Since: since, Refused: tooOld, Retired: c.retired}
	if pods != nil {
		h.Pods = pods.Status()
	}
	return h
}

// unavailable reports whether the cluster is down, and since when.
func (c *cell) unavailable() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down, c.downSince
}

// unavailableErr is the cell's ClusterUnavailableError, or nil.
func (c *cell) unavailableErr() error { return c.health().Err() }

// healthInterval is how often the Manager checks its clusters' informers
// (and, while they are unhealthy, pings the API server).
const healthInterval = 250 * time.Millisecond

// watchClusters marks clusters unavailable and available again, until
// ctx ends: each cluster in a goroutine of its own (a ping that hangs
// delays no other cluster), all ended before it returns. It runs in real
// time: it follows the API servers, not the Manager's own timing.
func (m *Manager) watchClusters(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range m.cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(healthInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				m.checkCluster(ctx, c, time.Now())
			}
		}()
	}
	wg.Wait()
}

// pingTimeout bounds checkCluster's ping of an API server.
const pingTimeout = 2 * time.Second

// ping asks the cluster's API server its version (GET /version), bounded
// by pingTimeout: the cheapest request that says it answers. The first
// answer is also the version check (spawner.CheckServerVersion) of a
// cluster that did not answer at Start.
func (c *cell) ping(ctx context.Context, log logr.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	c.mu.Lock()
	checked, tooOld := c.versionOK, c.tooOld
	c.mu.Unlock()
	if tooOld != nil {
		return tooOld
	}
	if checked {
		return c.client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error()
	}
	info, err := spawner.CheckServerVersion(ctx, c.client)
	if errors.Is(err, spawner.ErrServerTooOld) {
		err = fmt.Errorf("cluster %q: %w", c.name, err)
		log.Error(err, "refusing a cluster: its servers stay unavailable", "cluster", c.name)
		c.mu.Lock()
		c.tooOld = err
		c.mu.Unlock()
		return err
	}
	if err != nil {
		return err
	}
	log.V(1).Info("API server", "cluster", c.name, "version", info.GitVersion)
	c.mu.Lock()
	c.versionOK = true
	c.mu.Unlock()
	return nil
}

// checkCluster updates c's availability at now. A cluster is unavailable
// once its informers have been unhealthy for ClusterDownAfter and its
// API server does not answer a ping (GET /version); it is available again
// once its informers are healthy or the ping is answered, and an answer
// starts the ClusterDownAfter window again. The ping is
// made only while the informers are unhealthy: a healthy cluster costs
// no request. An informer that lists and is then refused its watch (as
// after an API server's restart, until its watch cache catches up) thus
// leaves the cluster available: its API server answers. On a change,
// checkCluster tells the watchers about every server in the cluster and,
// once it is back, reconciles them from the cache.
func (m *Manager) checkCluster(ctx context.Context, c *cell, now time.Time) {
	pods := c.podSet()
	if pods == nil {
		return
	}
	m.mu.Lock()
	log := m.log
	m.mu.Unlock()
	st := pods.Status()
	c.mu.Lock()
	late := !c.recovered && st.Synced
	c.mu.Unlock()
	if late {
		// Its servers are adopted before the cluster counts as seen:
		// from then on a server the Manager does not know is in none of
		// its clusters (see unknown).
		m.recoverLate(ctx, c, log)
		c.mu.Lock()
		c.recovered = true
		c.mu.Unlock()
		m.reconcileCell(c, false)
	}
	c.mu.Lock()
	// A cluster whose version is not checked yet (it did not answer at
	// Start) is asked until it answers, healthy informers or not; one
	// too old stays down.
	healthy := st.Healthy() && c.versionOK
	was := c.down
	if healthy {
		c.badSince = time.Time{}
	} else if c.badSince.IsZero() {
		c.badSince = now
	}
	bad := c.badSince
	c.mu.Unlock()
	// A blip shorter than ClusterDownAfter changes nothing: only a ping
	// that fails after it marks the cluster down.
	up, downNow := healthy, false
	if !healthy && (was || now.Sub(bad) >= m.opts.ClusterDownAfter) {
		up = c.ping(ctx, log) == nil
		downNow = !up
	}
	c.mu.Lock()
	switch {
	case up:
		c.down, c.downSince = false, time.Time{}
		if !healthy {
			// An answer is a success: while the informers catch up
			// (a relist after an outage, a watch refused until the
			// cache is warm) one slow ping must not mark the cluster
			// down again; it gets ClusterDownAfter again.
			c.badSince = now
		}
	case downNow && !c.down:
		c.down, c.downSince = true, bad
	}
	down, since := c.down, c.downSince
	c.mu.Unlock()
	if down == was {
		return
	}
	m.metrics.clusterUp(c.name, !down)
	if down {
		log.Info("cluster unavailable: its servers are reported unknown, starts and stops there fail", "cluster", c.name, "since", since, "lastError", fmt.Sprint(st.LastError))
	} else {
		log.Info("cluster available again", "cluster", c.name)
	}
	m.reconcileCell(c, down)
}

// reconcileCell tells the watchers the status of every server in c, and
// unless down reconciles each from the cache.
func (m *Manager) reconcileCell(c *cell, down bool) {
	for _, e := range m.entries() {
		e.mu.Lock()
		in := e.cell == c
		var view Status
		if in {
			view = m.viewLocked(e)
		}
		e.mu.Unlock()
		if !in {
			continue
		}
		m.notify(view)
		if !down {
			m.enqueue(e.key)
		}
	}
}
