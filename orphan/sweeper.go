package orphan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/internal/leader"
	"github.com/spawnkit/spawnkit/reflector"
)

// LeaderElection makes sweepers of several hub replicas take turns: only
// the holder of the Lease sweeps.
type LeaderElection struct {
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this replica (for example the pod name); required.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's;
	// 0 means the default, 15s, 10s and 2s. Start returns an error
	// unless LeaseDuration is at least 1s and greater than
	// RenewDeadline, which must exceed RetryPeriod × 1.2.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// SweeperCluster is one of the clusters a Sweeper sweeps.
type SweeperCluster struct {
	// Name of the cluster, as the hub names it in Known.AddIn; required,
	// and unique among SweeperOptions.Clusters.
	Name string
	// Client talks to the cluster's API server; required.
	Client kubernetes.Interface
	// Registry, when set, serves the cluster's pods (Options.Registry).
	Registry *reflector.Registry
}

// ClusterError is the error of one cluster's part of a sweep over
// several clusters (SweeperOptions.Clusters): its List or Cleanup failed.
type ClusterError struct {
	Cluster string
	Err     error
}

func (e *ClusterError) Error() string {
	return fmt.Sprintf("orphan: sweeping cluster %q: %v", e.Cluster, e.Err)
}

func (e *ClusterError) Unwrap() error { return e.Err }

// SweeperOptions configure NewSweeper. Known, and Client or Clusters, are
// required.
type SweeperOptions struct {
	// Client talks to the cluster swept, which List.Cluster names, and
	// holds the Lease. With Clusters it only holds the Lease (default:
	// the first cluster's client), and its cluster is not swept unless it
	// is one of Clusters.
	Client kubernetes.Interface
	// Clusters, when set, are the clusters swept, each with its own
	// client, all at once: a cluster whose sweep fails (its API server is
	// down) fails alone, as a *ClusterError naming it, joined into
	// SweepOnce's error, and the others are still cleaned.
	Clusters []SweeperCluster
	// Known returns the hub's servers at the start of each sweep. A nil
	// set is an error; so is an empty one unless AllowEmptyKnown is set.
	Known func(ctx context.Context) (*Known, error)
	// AllowEmptyKnown lets a sweep run when Known returns no servers at
	// all, which makes every object an orphan. Default false: such a
	// sweep fails with ErrEmptyKnown and deletes nothing.
	AllowEmptyKnown bool
	// List and Cleanup configure each sweep. Their Client (and with
	// Clusters, List's Registry and both Cluster fields) are set per
	// cluster swept: from Client and List.Cluster, or from each of
	// Clusters, which List.Registry and List.Cluster must then leave
	// unset.
	List    Options
	Cleanup CleanupOptions
	// Interval between sweeps. Default: 10 minutes.
	Interval time.Duration
	// LeaderElection, when set, lets only one of several sweepers sweep.
	LeaderElection *LeaderElection
	// Registerer, when set, receives the sweeper's metrics, each labelled
	// with the cluster it counts in (SweeperCluster.Name; List.Cluster,
	// by default "", without Clusters, which Prometheus stores as no
	// label at all).
	Registerer prometheus.Registerer
	Clock      clock.WithTicker
}

// Sweeper runs List and Cleanup every Interval. It is safe for concurrent
// use; Start runs it.
type Sweeper struct {
	opts SweeperOptions
	// targets are the clusters swept; leaderClient holds the Lease.
	targets      []SweeperCluster
	leaderClient kubernetes.Interface
	sweeps       atomic.Int64
	found        *prometheus.CounterVec
	outcome      *prometheus.CounterVec
	failures     *prometheus.CounterVec
	// onSweep, when set (by tests), is called with +1 when a sweep
	// begins and -1 when it ends.
	onSweep func(delta int)
}

// NewSweeper checks the options and registers the metrics.
func NewSweeper(opts SweeperOptions) (*Sweeper, error) {
	if (opts.Client == nil && len(opts.Clusters) == 0) || opts.Known == nil {
		return nil, errors.New("orphan: SweeperOptions needs Client (or Clusters) and Known")
	}
	targets, err := sweepTargets(opts)
	if err != nil {
		return nil, err
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if err := checkMinAge(opts.Cleanup.MinAge); err != nil {
		return nil, err
	}
	if err := errors.Join(checkKinds("List.Kinds", opts.List.Kinds), checkKinds("Cleanup.Kinds", opts.Cleanup.Kinds)); err != nil {
		return nil, err
	}
	if le := opts.LeaderElection; le != nil && (le.Identity == "" || le.Name == "" || le.Namespace == "") {
		return nil, errors.New("orphan: LeaderElection needs Namespace, Name and Identity")
	}
	s := &Sweeper{
		opts: opts, targets: targets, leaderClient: opts.Client,
		found: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_orphans_found_total", Help: "Orphans found by sweeps, by cluster, kind and reason.",
		}, []string{"cluster", "kind", "reason"}),
		outcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_orphans_cleanup_total", Help: "Orphans deleted, skipped or failed by sweeps, by cluster and kind.",
		}, []string{"cluster", "kind", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_orphans_sweep_failures_total", Help: "Sweeps of a cluster whose List or Cleanup failed, by cluster.",
		}, []string{"cluster"}),
	}
	if s.leaderClient == nil {
		s.leaderClient = targets[0].Client
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.found, s.outcome, s.failures} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("orphan: registering metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Sweeps is how many sweeps this sweeper has run.
func (s *Sweeper) Sweeps() int64 { return s.sweeps.Load() }

// sweepTargets are the clusters opts sweeps: Client's, named by
// List.Cluster, or each of Clusters.
func sweepTargets(opts SweeperOptions) ([]SweeperCluster, error) {
	if len(opts.Clusters) == 0 {
		return []SweeperCluster{{Name: opts.List.Cluster, Client: opts.Client, Registry: opts.List.Registry}}, nil
	}
	if opts.List.Registry != nil || opts.List.Cluster != "" {
		return nil, fmt.Errorf("%w: with SweeperOptions.Clusters, set each cluster's Registry and Name in Clusters, not List.Registry or List.Cluster", ErrInvalidOptions)
	}
	seen := map[string]bool{}
	for i, c := range opts.Clusters {
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("%w: SweeperOptions.Clusters[%d] has no Name", ErrInvalidOptions, i)
		case seen[c.Name]:
			return nil, fmt.Errorf("%w: SweeperOptions.Clusters names cluster %q twice", ErrInvalidOptions, c.Name)
		case c.Client == nil:
			return nil, fmt.Errorf("%w: SweeperOptions.Clusters: cluster %q has no Client", ErrInvalidOptions, c.Name)
		}
		seen[c.Name] = true
	}
	return opts.Clusters, nil
}

// SweepOnce runs one List and Cleanup in each cluster swept. With
// Clusters, the clusters are swept at once, each by a goroutine of its
// own that SweepOnce waits for; the Report holds every cluster's orphans
// (each with its Cluster), and the error joins a *ClusterError for each
// cluster that failed.
func (s *Sweeper) SweepOnce(ctx context.Context) (Report, error) {
	if s.onSweep != nil {
		s.onSweep(1)
		defer s.onSweep(-1)
	}
	known, err := s.opts.Known(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("orphan: getting the known servers: %w", err)
	}
	if known == nil {
		return Report{}, fmt.Errorf("%w: Known returned a nil set", ErrInvalidOptions)
	}
	if known.Len() == 0 && !s.opts.AllowEmptyKnown {
		return Report{}, fmt.Errorf("%w: refusing to sweep (set AllowEmptyKnown if the hub really has no servers)", ErrEmptyKnown)
	}
	if len(s.opts.Clusters) == 0 {
		// One cluster: its error as it is, as before there were several.
		r := s.sweepCluster(ctx, known, s.targets[0])
		if r.cleaned {
			s.sweeps.Add(1)
		}
		return r.report, r.err
	}
	return s.sweepClusters(ctx, known)
}

// sweepClusters sweeps every cluster of Clusters at once, each by a
// goroutine of its own that it waits for, and joins what they did: one
// Report, a *ClusterError for each cluster that failed, and one sweep
// counted if any cluster got as far as Cleanup.
func (s *Sweeper) sweepClusters(ctx context.Context, known *Known) (Report, error) {
	results := make([]clusterSweep, len(s.targets))
	var wg sync.WaitGroup
	for i, c := range s.targets {
		wg.Go(func() { results[i] = s.sweepCluster(ctx, known, c) })
	}
	wg.Wait()
	var report Report
	var errs []error
	cleaned := false
	for i, r := range results {
		report.Deleted = append(report.Deleted, r.report.Deleted...)
		report.Skipped = append(report.Skipped, r.report.Skipped...)
		report.Failed = append(report.Failed, r.report.Failed...)
		if r.err != nil {
			errs = append(errs, &ClusterError{Cluster: s.targets[i].Name, Err: r.err})
		}
		cleaned = cleaned || r.cleaned
	}
	if cleaned {
		s.sweeps.Add(1)
	}
	return report, errors.Join(errs...)
}

// clusterSweep is what sweeping one cluster did: cleaned says whether
// it got as far as Cleanup.
type clusterSweep struct {
	report  Report
	err     error
	cleaned bool
}

// sweepCluster runs List and Cleanup in cluster c, and counts them in the
// metrics.
func (s *Sweeper) sweepCluster(ctx context.Context, known *Known, c SweeperCluster) clusterSweep {
	listOpts, cleanupOpts := s.opts.List, s.opts.Cleanup
	listOpts.Client, listOpts.Registry, listOpts.Cluster = c.Client, c.Registry, c.Name
	cleanupOpts.Client, cleanupOpts.Cluster = c.Client, c.Name
	failed := func(err error) clusterSweep {
		if ctx.Err() == nil {
			// Not a cluster's failure when the run or leadership ended.
			s.failures.WithLabelValues(c.Name).Inc()
		}
		return clusterSweep{err: err}
	}
	orphans, err := List(ctx, known, listOpts)
	if err != nil {
		return failed(err)
	}
	if err := ctx.Err(); err != nil {
		// Leadership or the run ended while listing: delete nothing.
		return clusterSweep{err: err}
	}
	for _, o := range orphans {
		s.found.WithLabelValues(c.Name, string(o.Kind), string(o.Reason)).Inc()
	}
	report, err := Cleanup(ctx, orphans, cleanupOpts)
	for _, o := range report.Deleted {
		s.outcome.WithLabelValues(c.Name, string(o.Kind), "deleted").Inc()
	}
	for _, o := range report.Skipped {
		s.outcome.WithLabelValues(c.Name, string(o.Orphan.Kind), "skipped").Inc()
	}
	for _, o := range report.Failed {
		s.outcome.WithLabelValues(c.Name, string(o.Orphan.Kind), "failed").Inc()
	}
	logr.FromContextOrDiscard(ctx).Info("swept", "cluster", c.Name, "orphans", len(orphans), "deleted", len(report.Deleted),
		"skipped", len(report.Skipped), "failed", len(report.Failed), "dryRun", s.opts.Cleanup.DryRun)
	return clusterSweep{report: report, err: err, cleaned: true}
}

// Start sweeps every Interval until ctx ends (with leader election: while
// this sweeper leads). It returns nil when ctx ends.
//
// The Lease lives in SweeperOptions.Client's cluster, with Clusters by
// default the first of them: only that API server decides who sweeps, so
// while it is down no replica sweeps any cluster.
//
// Under leader election at most one sweep loop of this
// Sweeper runs at a time, and a term's loop has stopped before this
// sweeper campaigns again or gives up the Lease: on shutdown the loop is
// stopped and waited for, and only then is the Lease released for another
// replica. When the Lease is lost (not renewed within RenewDeadline) the
// loop's context is cancelled at once, so a sweep in progress stops before
// its next delete, well before another replica can acquire the Lease
// (LeaseDuration after the last renewal). A Lease that cannot be used (its
// namespace does not exist, RBAC does not grant get, create and update on
// leases.coordination.k8s.io) is an error returned at once, before any
// sweep; the error names the verb and the Lease.
func (s *Sweeper) Start(ctx context.Context) error {
	le := s.opts.LeaderElection
	if le == nil {
		s.loop(ctx)
		return nil
	}
	err := leader.Run(ctx, leader.Config{
		Client:    s.leaderClient,
		Namespace: le.Namespace, Name: le.Name, Identity: le.Identity,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Clock: s.opts.Clock,
	}, s.loop)
	if err != nil {
		return fmt.Errorf("orphan: sweeper leader election: %w", err)
	}
	return nil
}

// loop sweeps now and then every Interval until ctx ends.
func (s *Sweeper) loop(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	ticker := s.opts.Clock.NewTicker(s.opts.Interval)
	defer ticker.Stop()
	for {
		if _, err := s.SweepOnce(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "sweep failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}
