package leader

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/spawnkit/spawnkit/internal/retry"
)

// Run campaigns for the Lease until ctx ends. Each time this replica
// gains the Lease it calls lead, on Run's goroutine, with a context that
// ends when the lease is lost (not renewed within RenewDeadline) or ctx
// ends; lead must then return once its work has reached a safe point. If
// lead returns before its context ends, this replica goes on holding the
// Lease until it is lost or ctx ends, and lead is not called again in
// that term.
//
// The Lease is renewed while lead runs and released only after lead has
// returned, never while lead may still act: on shutdown, Run gives the
// Lease back at once (a holder-less record of 1 second, timestamped by
// cfg.Clock, as client-go's ReleaseOnCancel writes), so a standby takes
// over at its next try instead of after LeaseDuration. After losing the
// lease Run campaigns again.
//
// Run calls Check first and returns its error, so a Lease that cannot be
// used is an error, never an eternal standby. Later errors (a Lease
// whose RBAC rule is revoked, an API server away) are logged to the
// logger in ctx (logr.FromContextOrDiscard), which also receives
// client-go's elector logs, and Run goes on campaigning. It returns nil
// when ctx ends; a release that fails is logged, and the Lease then
// expires after LeaseDuration.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context)) error {
	cfg, err := cfg.complete()
	if err != nil {
		return err
	}
	if lead == nil {
		return fmt.Errorf("leader: Run needs a lead function")
	}
	if err := check(ctx, cfg); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if cfg.Observe != nil {
			cfg.Observe(err)
		}
		return err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)
	for ctx.Err() == nil {
		if err := term(ctx, cfg, lead, log); err != nil {
			return err
		}
	}
	return nil
}

// term campaigns once and, if this replica gains the Lease, runs lead
// until the lease is lost or ctx ends. It returns once lead has returned
// and the elector has stopped, having given the Lease back if ctx ended.
func term(ctx context.Context, cfg Config, lead func(context.Context), log logr.Logger) error {
	lock := &termLock{LeaseLock: newLock(cfg), observe: cfg.Observe}
	// The elector runs under its own context, cancelled only once lead
	// has returned: the Lease is renewed while lead may still act, and
	// given back (below) only after. Its logs go to Run's logger.
	electCtx, stopElect := context.WithCancel(logr.NewContext(context.WithoutCancel(ctx), log))
	defer stopElect()
	// OnStartedLeading runs once at most, in a goroutine client-go starts
	// and does not wait for: it hands lead's context over and returns.
	leading := make(chan context.Context, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: cfg.LeaseDuration,
		RenewDeadline: cfg.RenewDeadline,
		RetryPeriod:   cfg.RetryPeriod,
		// Released by release, after lead has returned.
		ReleaseOnCancel: false,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) { leading <- leadCtx },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		// complete checks what NewLeaderElector checks.
		return fmt.Errorf("leader: %w", err)
	}
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		elector.Run(electCtx)
	}()
	select {
	case leadCtx := <-leading:
		log.Info("leading")
		termCtx, cancel := context.WithCancelCause(leadCtx)
		stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		lead(termCtx)
		// A lead that returned early: hold the Lease until the term ends.
		<-termCtx.Done()
		stop()
		cancel(nil)
		stopElect()
		<-elected
		if ctx.Err() == nil {
			log.Info("lost the Lease; campaigning again")
			return nil
		}
	case <-ctx.Done():
		stopElect()
		<-elected
		if !lock.written.Load() {
			return nil
		}
		// Gained just as ctx ended: no lead ran. The callback has been
		// started; wait for it, then give the Lease back.
		<-leading
	}
	switch released, err := release(ctx, cfg); {
	case err != nil:
		log.Error(err, "could not give the Lease back; another replica takes over when it expires", "leaseDuration", cfg.LeaseDuration)
	case released:
		log.Info("gave the Lease back")
	}
	return nil
}

func newLock(cfg Config) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
}

// termLock is the elector's lock for one term. It records whether the
// elector has written the Lease: every write client-go's elector makes
// names this replica as holder, and its first success is the acquisition
// after which client-go starts OnStartedLeading. Once the elector has
// returned, written says whether that callback has been started, even
// when ctx ended before term received from it.
type termLock struct {
	*resourcelock.LeaseLock
	written atomic.Bool
	observe func(error)
}

func (l *termLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.LeaseLock.Get(ctx)
	l.report(err)
	return rec, raw, err
}

func (l *termLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.LeaseLock.Create(ctx, rec)
	if err == nil {
		l.written.Store(true)
	}
	l.report(err)
	return err
}

func (l *termLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.LeaseLock.Update(ctx, rec)
	if err == nil {
		l.written.Store(true)
	}
	l.report(err)
	return err
}

// report hands a call's outcome to Config.Observe. NotFound (no Lease
// yet: the elector creates it) and Conflict (another replica wrote
// first) are answers the election expects, not failures to reach it.
func (l *termLock) report(err error) {
	if l.observe == nil {
		return
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		err = nil
	}
	l.observe(err)
}

// release gives the Lease back if this replica still holds it, writing
// what client-go's ReleaseOnCancel writes (no holder, a duration of 1
// second) but timestamped by cfg.Clock. A Conflict (the Lease changed
// between read and write) is retried; the whole is bounded by
// RenewDeadline. It reports whether it wrote the Lease.
func release(ctx context.Context, cfg Config) (released bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.RenewDeadline)
	defer cancel()
	lock := newLock(cfg)
	err = retry.Do(ctx, retry.Options{MaxElapsed: cfg.RenewDeadline, Retryable: apierrors.IsConflict}, func(ctx context.Context) error {
		rec, _, err := lock.Get(ctx)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if rec.HolderIdentity != cfg.Identity {
			return nil
		}
		now := metav1.NewTime(cfg.Clock.Now())
		err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions:    rec.LeaderTransitions,
			LeaseDurationSeconds: 1,
			RenewTime:            now,
			AcquireTime:          now,
		})
		released = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("leader: releasing Lease %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	return released, nil
}
