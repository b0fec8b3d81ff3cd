package spawner

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderElection makes Manager replicas active/passive on a Lease
// (client-go's leaderelection).
type LeaderElection struct {
	// Namespace and Name of the Lease. Name is required; Namespace
	// defaults to the configuration's namespace.
	Namespace, Name string
	// Identity of this replica. Default: host name and process id.
	Identity string
	// LeaseDuration (default 15s), RenewDeadline (default 10s) and
	// RetryPeriod (default 2s) as in client-go: a standby takes over
	// within LeaseDuration of the leader going away.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Leading reports whether this Manager runs servers now.
func (m *Manager) Leading() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leading && m.run != nil
}

// elect runs leader election until ctx ends, switching the Manager
// between leader and standby. On losing the lease the operations in
// flight are detached (like a shutdown) and the Manager becomes a
// standby again.
func (m *Manager) elect(ctx context.Context, le *LeaderElection, log logr.Logger) {
	ns := le.Namespace
	if ns == "" {
		ns = m.base.cfg.Namespace
	}
	id := le.Identity
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: le.Name},
		Client:     m.opts.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	cfg := leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   orDuration(le.LeaseDuration, 15*time.Second),
		RenewDeadline:   orDuration(le.RenewDeadline, 10*time.Second),
		RetryPeriod:     orDuration(le.RetryPeriod, 2*time.Second),
		ReleaseOnCancel: true,
		Name:            le.Name,
	}
	for ctx.Err() == nil {
		// Each term gets its own context for its operations, so losing
		// the lease detaches exactly them.
		term, endTerm := context.WithCancelCause(ctx)
		cfg.Callbacks = leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				log.Info("leading", "identity", id)
				m.mu.Lock()
				m.leading = true
				m.run = term
				m.mu.Unlock()
				m.resync(ctx) // resume servers found starting
			},
			OnStoppedLeading: func() {
				log.Info("no longer leading", "identity", id)
				m.mu.Lock()
				m.leading = false
				m.mu.Unlock()
				endTerm(ErrShutdown)
			},
		}
		elector, err := leaderelection.NewLeaderElector(cfg)
		if err != nil {
			log.Error(err, "leader election")
			endTerm(nil)
			return
		}
		elector.Run(term)
		endTerm(ErrShutdown)
		m.mu.Lock()
		if m.run == term {
			m.run = ctx
		}
		m.mu.Unlock()
	}
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
