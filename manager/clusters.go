package manager

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// Cluster is one Kubernetes cluster a Manager runs servers in
// (Options.Clusters).
type Cluster struct {
	// Name names the cluster in kubernetes_cluster, on its servers'
	// objects (label naming.LabelCluster), in their State and Status, in
	// metrics (label cluster) and in Health: a DNS-1123 label, unique.
	Name string
	// Client talks to the cluster, with its own rate limits; Registry
	// holds the cluster's informers (made from Client).
	Client   kubernetes.Interface
	Registry *reflector.Registry
	// Config, when set, is the cluster's base configuration instead of
	// Options.Config: typically Options.Config.Override with the
	// cluster's own values (a pod_connect_ip the hub can reach, an image
	// registry near it). Its profile list should be the same: a profile
	// picks the cluster before the cluster's configuration applies.
	Config *kubespawner.Config
	// Retired marks a cluster that no new start goes to, kept only for
	// the servers still running there (removed from the placement, or
	// being emptied): they are recovered, reported, polled, watched and
	// stoppable as anywhere else. A profile or a Placement that names it
	// is refused; a stopped server that last ran there starts in the
	// default cluster. Remove it once Health counts no server there. The
	// default (first) cluster cannot be retired.
	Retired bool
}

// cell is one cluster's machinery: what a single-cluster Manager is.
type cell struct {
	name     string
	client   kubernetes.Interface
	registry *reflector.Registry
	factory  *spawner.Factory
	cfg      kubespawner.Config // the factory's, defaulted
	ownCfg   bool               // Cluster.Config was set
	slots    chan struct{}      // start slots (ConcurrentSpawnLimit), nil for none
	retired  bool               // Cluster.Retired: no start goes there

	// hooks and clock are the Manager's, for Factories of a start's
	// own Config (factoryFor).
	hooks spawner.Hooks
	tp    trace.TracerProvider
	hash  bool
	clock clock.Clock

	mu   sync.Mutex // guards the fields below
	pods *podSet    // set by Start
	// configured are the Factories of start Configs (SpawnOptions.Config)
	// by the Config's address: a caller that keeps its Configs (the
	// service, by content) makes each Factory once.
	configured map[*kubespawner.Config]*spawner.Factory
	// badSince is when the informers were first seen unhealthy in a run
	// of unhealthy checks (zero while healthy); down is set once that
	// run is longer than ClusterDownAfter, downSince is when it began.
	badSince  time.Time
	down      bool
	downSince time.Time
	// versionOK is set once the API server's version has been checked
	// (spawner.CheckServerVersion): at Start, or, for a cluster that did
	// not answer then, by checkCluster once it does. tooOld is set when
	// that check refused the server: the cluster stays unavailable.
	versionOK bool
	tooOld    error
	// recovered is set once the Manager has looked at the cluster's
	// synced cache: by recover at Start, or, for a cluster that synced
	// later, by checkCluster, which then reconciles its servers (their
	// pods come as informer events; a seeded server without one would
	// otherwise never be looked at).
	recovered bool
}

func (c *cell) podSet() *podSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods
}

// newCells checks opts' clusters and makes their Factories.
func newCells(opts *Options) ([]*cell, error) {
	clusters := opts.Clusters
	if len(clusters) == 0 {
		clusters = []Cluster{{Client: opts.Client, Registry: opts.Registry}}
	} else if opts.Client != nil || opts.Registry != nil {
		return nil, errors.New("manager: Options.Clusters replaces Client and Registry: set either, not both")
	}
	var cells []*cell
	seen := map[string]bool{}
	for i, cl := range clusters {
		if len(opts.Clusters) > 0 {
			if errs := validation.IsDNS1123Label(cl.Name); len(errs) > 0 {
				return nil, fmt.Errorf("manager: Clusters[%d].Name %q: %s", i, cl.Name, strings.Join(errs, "; "))
			}
			if seen[cl.Name] {
				return nil, fmt.Errorf("manager: Clusters[%d].Name %q: two clusters of that name", i, cl.Name)
			}
			seen[cl.Name] = true
			if cl.Retired && i == 0 {
				return nil, fmt.Errorf("manager: Clusters[0] %q is the default cluster, which cannot be retired: list a cluster that takes starts first", cl.Name)
			}
		}
		cfg := opts.Config
		if cl.Config != nil {
			cfg = *cl.Config
		}
		f, err := spawner.NewFactory(spawner.Options{Client: cl.Client, Registry: cl.Registry, Config: cfg, Hooks: opts.Hooks, Clock: opts.Clock, Cluster: cl.Name,
			TracerProvider: opts.TracerProvider, HashNames: opts.HashNames})
		if err != nil {
			if cl.Name != "" {
				return nil, fmt.Errorf("manager: cluster %q: %w", cl.Name, err)
			}
			return nil, err
		}
		if _, _, open := f.Namespaces(); open != "" {
			return nil, fmt.Errorf("manager: %s lets the user type the namespace (\"{value}\" in its namespace override): the Manager can neither watch nor trust a namespace it cannot list in advance", open)
		}
		cells = append(cells, &cell{name: cl.Name, client: cl.Client, registry: cl.Registry, factory: f, cfg: f.Config(), retired: cl.Retired,
			ownCfg: cl.Config != nil, hooks: opts.Hooks, clock: opts.Clock, tp: opts.TracerProvider, hash: opts.HashNames})
	}
	return cells, nil
}

// cellNamed is the named cluster, or an error naming the ones there are.
func (m *Manager) cellNamed(name string) (*cell, error) {
	if c, ok := m.byName[name]; ok {
		return c, nil
	}
	names := make([]string, len(m.cells))
	for i, c := range m.cells {
		names[i] = c.name
	}
	if !m.multi {
		return nil, fmt.Errorf("%w: no cluster %q: the Manager runs one cluster (Options.Clusters names several)", ErrNoSuchCluster, name)
	}
	return nil, fmt.Errorf("%w: no cluster %q; the clusters are %s", ErrNoSuchCluster, name, strings.Join(names, ", "))
}

// synced reports whether the cell's informers have synced.
func (c *cell) synced() bool {
	pods := c.podSet()
	return pods != nil && pods.Status().Synced
}

// maxConfigured bounds the Factories a cell keeps for start Configs; past
// it they are made again (a Factory holds no resources of its own).
const maxConfigured = 64

// factoryFor is the Factory a start with Config cfg uses in cluster c:
// c's own without one.
func (m *Manager) factoryFor(c *cell, cfg *kubespawner.Config) (*spawner.Factory, error) {
	if cfg == nil {
		return c.factory, nil
	}
	if c.ownCfg {
		return nil, fmt.Errorf("manager: cluster %q has a configuration of its own (Cluster.Config), which a start's Config would replace: give the start no Config, or the cluster none", c.name)
	}
	c.mu.Lock()
	f := c.configured[cfg]
	c.mu.Unlock()
	if f != nil {
		return f, nil
	}
	f, err := spawner.NewFactory(spawner.Options{Client: c.client, Registry: c.registry, Config: *cfg, Hooks: c.hooks, Clock: c.clock, Cluster: c.name,
		TracerProvider: c.tp, HashNames: c.hash})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.configured) >= maxConfigured {
		clear(c.configured)
	}
	if c.configured == nil {
		c.configured = map[*kubespawner.Config]*spawner.Factory{}
	}
	c.configured[cfg] = f
	return f, nil
}
