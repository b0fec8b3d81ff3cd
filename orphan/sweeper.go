package orphan

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// LeaderElection makes sweepers of several hub replicas take turns: only
// the holder of the Lease sweeps.
type LeaderElection struct {
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this replica (for example the pod name); required.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's;
	// defaults 15s, 10s, 2s.
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
// Under leader election at most one sweep loop of this Sweeper runs at a
// time, and a term's loop has stopped before this sweeper campaigns again
// or gives up the Lease: on shutdown the loop is stopped and waited for,
// and only then is the Lease released for another replica. When the
// Lease is lost (not renewed within RenewDeadline) the loop's context is
// cancelled at once, so a sweep in progress stops before its next delete,
// well before another replica can acquire the Lease (LeaseDuration after
// the last renewal).
func (s *Sweeper) Start(ctx context.Context) error {
	le := s.opts.LeaderElection
	if le == nil {
		s.loop(ctx)
		return nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     s.opts.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	for ctx.Err() == nil {
		if err := s.term(ctx, lock); err != nil {
			return err
		}
	}
	return nil
}

// term campaigns once, sweeps while leading, and returns when the loop of
// this term has stopped: when leadership is lost or ctx ends.
func (s *Sweeper) term(ctx context.Context, lock *resourcelock.LeaseLock) error {
	le := s.opts.LeaderElection
	// The elector runs under its own context, cancelled only after the
	// sweep loop has stopped, so the Lease is never given up while a
	// sweep may still delete.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	leading := make(chan context.Context, 1)
	cfg := leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: orDefault(le.LeaseDuration, 15*time.Second),
		RenewDeadline: orDefault(le.RenewDeadline, 10*time.Second),
		RetryPeriod:   orDefault(le.RetryPeriod, 2*time.Second),
		// Released by release below, after the loop has stopped.
		ReleaseOnCancel: false,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			// client-go calls this in a goroutine it does not wait for:
			// hand the term's context to term, which runs the loop.
			OnStartedLeading: func(leadCtx context.Context) { leading <- leadCtx },
			OnStoppedLeading: func() {},
		},
	}
	elector, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		return fmt.Errorf("orphan: leader election: %w", err)
	}
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		elector.Run(runCtx)
	}()
	select {
	case leadCtx := <-leading:
		loopCtx, cancel := context.WithCancel(leadCtx)
		stop := context.AfterFunc(ctx, cancel)
		s.loop(loopCtx)
		stop()
		cancel()
		if ctx.Err() != nil {
			// Shutdown: the loop has stopped; now give up the Lease.
			stopRun()
			<-runDone
			s.release(lock)
			return nil
		}
		// Leadership lost: the elector has returned or is returning.
		stopRun()
		<-runDone
	case <-ctx.Done():
		stopRun()
		<-runDone
		select {
		case <-leading:
			// Acquired just as ctx ended: no loop ran; give it back.
			s.release(lock)
		default:
		}
	}
	return nil
}

// release gives up the Lease if this sweeper still holds it, as
// client-go's ReleaseOnCancel does, so another replica can take over
// without waiting for it to expire.
func (s *Sweeper) release(lock *resourcelock.LeaseLock) {
	ctx, cancel := context.WithTimeout(context.Background(), orDefault(s.opts.LeaderElection.RenewDeadline, 10*time.Second))
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err != nil || rec.HolderIdentity != lock.Identity() {
		return
	}
	now := metav1.NewTime(time.Now())
	_ = lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions:    rec.LeaderTransitions,
		LeaseDurationSeconds: 1,
		RenewTime:            now,
		AcquireTime:          now,
	})
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

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
