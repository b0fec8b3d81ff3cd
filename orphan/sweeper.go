package orphan

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/internal/leader"
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

// SweeperOptions configure NewSweeper. Client and Known are required.
type SweeperOptions struct {
	Client kubernetes.Interface
	// Known returns the hub's servers at the start of each sweep. A nil
	// set is an error; so is an empty one unless AllowEmptyKnown is set.
	Known func(ctx context.Context) (*Known, error)
	// AllowEmptyKnown lets a sweep run when Known returns no servers at
	// all, which makes every object an orphan. Default false: such a
	// sweep fails with ErrEmptyKnown and deletes nothing.
	AllowEmptyKnown bool
	// List and Cleanup configure each sweep; their Client is set from
	// Client.
	List    Options
	Cleanup CleanupOptions
	// Interval between sweeps. Default: 10 minutes.
	Interval time.Duration
	// LeaderElection, when set, lets only one of several sweepers sweep.
	LeaderElection *LeaderElection
	// Registerer, when set, receives the sweeper's metrics.
	Registerer prometheus.Registerer
	Clock      clock.WithTicker
}

// Sweeper runs List and Cleanup every Interval. It is safe for concurrent
// use; Start runs it.
type Sweeper struct {
	opts    SweeperOptions
	sweeps  atomic.Int64
	found   *prometheus.CounterVec
	outcome *prometheus.CounterVec
	// onSweep, when set (by tests), is called with +1 when a sweep
	// begins and -1 when it ends.
	onSweep func(delta int)
}

// NewSweeper checks the options and registers the metrics.
func NewSweeper(opts SweeperOptions) (*Sweeper, error) {
	if opts.Client == nil || opts.Known == nil {
		return nil, errors.New("orphan: SweeperOptions needs Client and Known")
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.List.Client, opts.Cleanup.Client = opts.Client, opts.Client
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
		opts: opts,
		found: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_orphans_found_total", Help: "Orphans found by sweeps, by kind and reason.",
		}, []string{"kind", "reason"}),
		outcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_orphans_cleanup_total", Help: "Orphans deleted, skipped or failed by sweeps.",
		}, []string{"kind", "outcome"}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.found, s.outcome} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("orphan: registering metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Sweeps is how many sweeps this sweeper has run.
func (s *Sweeper) Sweeps() int64 { return s.sweeps.Load() }

// SweepOnce runs one List and Cleanup.
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
	orphans, err := List(ctx, known, s.opts.List)
	if err != nil {
		return Report{}, err
	}
	if err := ctx.Err(); err != nil {
		// Leadership or the run ended while listing: delete nothing.
		return Report{}, err
	}
	for _, o := range orphans {
		s.found.WithLabelValues(string(o.Kind), string(o.Reason)).Inc()
	}
	report, err := Cleanup(ctx, orphans, s.opts.Cleanup)
	for _, o := range report.Deleted {
		s.outcome.WithLabelValues(string(o.Kind), "deleted").Inc()
	}
	for _, o := range report.Skipped {
		s.outcome.WithLabelValues(string(o.Orphan.Kind), "skipped").Inc()
	}
	for _, o := range report.Failed {
		s.outcome.WithLabelValues(string(o.Orphan.Kind), "failed").Inc()
	}
	s.sweeps.Add(1)
	logr.FromContextOrDiscard(ctx).Info("swept", "orphans", len(orphans), "deleted", len(report.Deleted),
		"skipped", len(report.Skipped), "failed", len(report.Failed), "dryRun", s.opts.Cleanup.DryRun)
	return report, err
}

// Start sweeps every Interval until ctx ends (with leader election: while
// this sweeper leads). It returns nil when ctx ends.
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
		Client:    s.opts.Client,
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
