package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// Cluster is one Kubernetes cluster a Manager runs servers in
// (Options.Clusters).
type Cluster struct {
	// Name names the cluster in kubernetes_cluster, on its servers'
	// objects (label spawnkit.io/cluster), in their State and Status, in
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

// PlacementRequest is what Options.Placement decides a start's clusters
// from.
type PlacementRequest struct {
	Server  naming.Server
	Options SpawnOptions
	// Profile are the clusters the resolved profile names
	// (kubernetes_cluster), in order; empty when it names none.
	Profile []string
	// Previous is the cluster the server last ran in ("" when unknown):
	// its claim, and with it the user's files, is there.
	Previous string
	// Clusters are every cluster's health now, the default first.
	Clusters []ClusterHealth
}

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

func (c *cell) podSet() *podSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods
}

// unavailable reports whether the cluster is down, and since when.
func (c *cell) unavailable() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down, c.downSince
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

// unavailableErr is the cell's ClusterUnavailableError, or nil.
func (c *cell) unavailableErr() error { return c.health().Err() }

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
		f, err := spawner.NewFactory(spawner.Options{Client: cl.Client, Registry: cl.Registry, Config: cfg, Hooks: opts.Hooks, Clock: opts.Clock, Cluster: cl.Name})
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
			ownCfg: cl.Config != nil, hooks: opts.Hooks, clock: opts.Clock})
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

// place picks the cluster of a start of s: from Placement, else the
// resolved profile's kubernetes_cluster, else the cluster it last ran in
// (prev, nil when unknown), else the default; the first of those that is
// available. Without several clusters (and without kubernetes_cluster)
// it is the one cluster, at no cost.
func (m *Manager) place(ctx context.Context, s naming.Server, opts SpawnOptions, prev *cell) (*cell, error) {
	var profile []string
	if m.multi || m.configNamesClusters() || opts.Config != nil {
		base := m.cfg
		switch {
		case opts.Config != nil:
			base = *opts.Config
		case prev != nil:
			base = prev.cfg
		}
		cfg, err := base.ResolveWith(ctx, opts.UserOptions, opts.Attributes)
		if err != nil {
			return nil, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid, Err: err}
		}
		profile = cfg.KubernetesCluster
	}
	var names []string
	switch {
	case m.opts.Placement != nil:
		req := PlacementRequest{Server: s, Options: opts, Profile: slices.Clone(profile), Clusters: m.clusterHealth()}
		if prev != nil {
			req.Previous = prev.name
		}
		var err error
		if names, err = m.opts.Placement(ctx, req); err != nil {
			return nil, fmt.Errorf("manager: placing server %q of user %q: %w", s.Servername, s.Username, err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("manager: placing server %q of user %q: Placement named no cluster", s.Servername, s.Username)
		}
		if len(profile) > 0 {
			// The profile is the operator's rule; Placement picks within it.
			for _, n := range names {
				if !slices.Contains(profile, n) {
					return nil, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid,
						Err: fmt.Errorf("manager: Placement put the server in cluster %q, but its profile allows only %s (kubernetes_cluster)", n, strings.Join(profile, ", "))}
				}
			}
		}
	case len(profile) > 0:
		names = profile
	case prev != nil && !prev.retired:
		names = []string{prev.name}
	default:
		names = []string{m.cells[0].name}
	}
	// Every name is checked before one is picked: a misspelt fallback
	// must not hide until the first cluster is down, the moment it was
	// written for.
	cells := make([]*cell, len(names))
	for i, n := range names {
		c, err := m.cellNamed(n)
		if err == nil && c.retired {
			err = fmt.Errorf("%w: cluster %q is retired: no start goes there", ErrNoSuchCluster, n)
		}
		if err != nil {
			return nil, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid, Err: err}
		}
		cells[i] = c
	}
	var unavailable []error
	for _, c := range cells {
		if err := c.unavailableErr(); err != nil {
			unavailable = append(unavailable, err)
			continue
		}
		return c, nil
	}
	return nil, fmt.Errorf("manager: server %q of user %q cannot start: %w", s.Servername, s.Username, errors.Join(unavailable...))
}

// configNamesClusters reports whether a one-cluster Manager's
// configuration could name a cluster (kubernetes_cluster in its base or
// a profile): a start then resolves it, so that a name other than the
// one cluster's is an error rather than ignored.
func (m *Manager) configNamesClusters() bool {
	return len(m.cfg.KubernetesCluster) > 0 || len(m.cfg.ProfileList) > 0 && profilesName(m.cfg.ProfileList) || m.cfg.ProfileListFunc != nil
}

// profilesName reports whether any profile or choice overrides
// kubernetes_cluster.
func profilesName(ps []kubespawner.Profile) bool {
	named := false
	eachClusterOverride(ps, func(string, any) { named = true })
	return named
}

// eachClusterOverride calls f with each kubernetes_cluster override of a
// profile list (where, and its value).
func eachClusterOverride(ps []kubespawner.Profile, f func(where string, v any)) {
	for _, p := range ps {
		where := fmt.Sprintf("profile %q", p.Slug)
		if p.Slug == "" {
			where = fmt.Sprintf("profile %q", p.DisplayName)
		}
		if v, ok := p.KubeSpawnerOverride["kubernetes_cluster"]; ok {
			f(where, v)
		}
		for _, o := range p.ProfileOptions {
			for _, ch := range o.Choices {
				if v, ok := ch.KubeSpawnerOverride["kubernetes_cluster"]; ok {
					f(fmt.Sprintf("%s, option %q, choice %q", where, o.Name, ch.Key), v)
				}
			}
			if u := o.UnlistedChoice; u != nil {
				if v, ok := u.KubeSpawnerOverride["kubernetes_cluster"]; ok {
					f(fmt.Sprintf("%s, option %q, unlisted choice", where, o.Name), v)
				}
			}
		}
	}
}

// checkClusterNames refuses, at New, a configuration whose
// kubernetes_cluster (its base's, or a listed profile's or choice's)
// names a cluster the Manager does not have: every start of it would be
// refused, and a misspelt fallback would hide until the first choice is
// down. A value that is not a list of names is left to the start, which
// refuses it naming the option, as it does every override's value; so
// are the profiles of a ProfileListFunc, which exist only per start.
func (m *Manager) checkClusterNames() error {
	check := func(cluster, where string, names []string) error {
		for _, n := range names {
			if len(validation.IsDNS1123Label(n)) > 0 {
				continue // not a name: the start refuses the value
			}
			c, err := m.cellNamed(n)
			if err == nil && c.retired {
				err = fmt.Errorf("cluster %q is retired (no start goes there): name a cluster that takes starts", n)
			}
			if err != nil {
				if cluster != "" {
					where = fmt.Sprintf("cluster %q's configuration, %s", cluster, where)
				}
				return fmt.Errorf("manager: %s: kubernetes_cluster %q: %w", where, n, err)
			}
		}
		return nil
	}
	for _, c := range m.cells {
		if err := check(c.name, "base", c.cfg.KubernetesCluster); err != nil {
			return err
		}
		var err error
		eachClusterOverride(c.cfg.ProfileList, func(where string, v any) {
			if err != nil {
				return
			}
			raw, jerr := json.Marshal(v)
			var names kubespawner.ClusterNames
			if jerr != nil || names.UnmarshalJSON(raw) != nil {
				return
			}
			err = check(c.name, where, names)
		})
		if err != nil {
			return err
		}
		if !m.multi {
			break
		}
	}
	return nil
}

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

// viewLocked is e's status as callers see it (e.mu held): its cluster
// named, and, while that cluster is unavailable, a server that was
// starting, running or stopping is PhaseUnknown (the cluster may have
// changed it; nothing there is deleted or failed for it), with its last
// known phase in the message.
func (m *Manager) viewLocked(e *entry) Status {
	st := e.status
	st.Cluster = e.cell.name
	if e.hubSet {
		st.State.Hub = e.hub
	}
	if e.splitBrain != "" {
		st.Phase, st.Ready, st.ExitCode = PhaseUnknown, false, nil
		st.Reason, st.Message = ReasonSplitBrain, e.splitBrain
		return st
	}
	if !m.multi {
		return st
	}
	if e.seeded {
		// Only the hub's record: the cluster's cache has not been
		// looked at for it yet (not synced since Start, or unavailable).
		c := e.cell
		c.mu.Lock()
		recovered, down := c.recovered, c.down
		c.mu.Unlock()
		if !recovered || down {
			st.Phase, st.Ready, st.ExitCode, st.Reason = PhaseUnknown, false, nil, ReasonClusterUnavailable
			st.Message = fmt.Sprintf("cluster %q has not been seen since the Manager started; the server's only record is the hub's", c.name)
			return st
		}
	}
	switch st.Phase {
	case PhaseStarting, PhaseRunning, PhaseStopping:
		if down, since := e.cell.unavailable(); down {
			st.Message = fmt.Sprintf("cluster %q has not answered since %s; the server was %s then", e.cell.name, since.UTC().Format(time.RFC3339), st.Phase)
			st.Phase, st.Ready, st.ExitCode, st.Reason = PhaseUnknown, false, nil, ReasonClusterUnavailable
		}
	}
	return st
}

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
	f, err := spawner.NewFactory(spawner.Options{Client: c.client, Registry: c.registry, Config: *cfg, Hooks: c.hooks, Clock: c.clock, Cluster: c.name})
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
