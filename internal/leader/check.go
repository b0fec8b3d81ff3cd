package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/clock"
)

// Config is one Lease and this replica's identity in it.
type Config struct {
	// Client reaches the Lease (CoordinationV1); required.
	Client kubernetes.Interface
	// Namespace and Name of the Lease, and Identity of this replica in
	// it (for example its pod name, unique among the replicas); all
	// required.
	Namespace, Name, Identity string
	// LeaseDuration is how long a standby waits, after it last saw the
	// Lease change, before it takes the Lease over. Default 15s; at
	// least 1s, since the Lease stores whole seconds.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader tries to renew before it
	// gives up leading. Default 10s; less than LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the wait between tries. Default 2s; RenewDeadline
	// must exceed RetryPeriod × 1.2 (client-go's JitterFactor).
	RetryPeriod time.Duration
	// Clock gives the timestamps of a release. Default: the real clock.
	// client-go's elector keeps its own real clock.
	Clock clock.Clock
	// Observe, when set, is called after every read or write of the
	// Lease that Run's elector makes, and with the error of Run's first
	// Check when it fails, with its error (nil on success;
	// a Conflict or NotFound, which the elector handles, counts as an
	// answer and is passed as nil). It lets a readiness probe say that a
	// standby cannot reach its Lease instead of waiting silently. It
	// runs on the elector's goroutine and must not block.
	Observe func(err error)
}

// complete returns cfg with its defaults filled in, or an error naming
// every field that is wrong.
func (cfg Config) complete() (Config, error) {
	var errs []error
	if cfg.Client == nil {
		errs = append(errs, errors.New("Client is required"))
	}
	for _, f := range []struct{ name, value string }{
		{"Namespace", cfg.Namespace}, {"Name", cfg.Name}, {"Identity", cfg.Identity},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"LeaseDuration", &cfg.LeaseDuration, 15 * time.Second},
		{"RenewDeadline", &cfg.RenewDeadline, 10 * time.Second},
		{"RetryPeriod", &cfg.RetryPeriod, 2 * time.Second},
	}
	negative := false
	for _, f := range durations {
		switch {
		case *f.d < 0:
			errs = append(errs, fmt.Errorf("%s is %s, must not be negative (0 means %s)", f.name, *f.d, f.def))
			negative = true
		case *f.d == 0:
			*f.d = f.def
		}
	}
	if !negative {
		// client-go's rules (NewLeaderElector), and whole seconds: the
		// Lease stores int(LeaseDuration / time.Second), and a Lease of
		// 0 seconds would let a standby take over at once.
		if cfg.LeaseDuration < time.Second {
			errs = append(errs, fmt.Errorf("LeaseDuration is %s, must be at least 1s", cfg.LeaseDuration))
		}
		if cfg.LeaseDuration <= cfg.RenewDeadline {
			errs = append(errs, fmt.Errorf("LeaseDuration (%s) must be greater than RenewDeadline (%s)", cfg.LeaseDuration, cfg.RenewDeadline))
		}
		if jittered := time.Duration(leaderelection.JitterFactor * float64(cfg.RetryPeriod)); cfg.RenewDeadline <= jittered {
			errs = append(errs, fmt.Errorf("RenewDeadline (%s) must be greater than RetryPeriod × %.1f (%s)", cfg.RenewDeadline, leaderelection.JitterFactor, jittered))
		}
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("leader: invalid Config: %w", errors.Join(errs...))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return cfg, nil
}

// Check validates cfg and proves the Lease can be used, with the API calls
// the election makes: it reads the Lease (creating it without a holder
// when it does not exist) and updates it unchanged. The update changes
// nothing, but the API server authorises the verb first; a Conflict (a
// replica renewed in between) proves the permission as well. A Lease that
// cannot be read, created or updated, in a namespace that does not exist
// or without an RBAC rule, is an error that names the verb, the resource,
// the namespace and the Lease, says what to do, and wraps the API error
// (apierrors.IsForbidden and IsNotFound see it).
func Check(ctx context.Context, cfg Config) error {
	cfg, err := cfg.complete()
	if err != nil {
		return err
	}
	return check(ctx, cfg)
}

// check is Check for a completed cfg.
func check(ctx context.Context, cfg Config) error {
	leases := cfg.Client.CoordinationV1().Leases(cfg.Namespace)
	verb := "get"
	lease, err := leases.Get(ctx, cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		verb = "create"
		lease, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Another replica created it in between; creating was
			// authorised all the same.
			verb = "get"
			lease, err = leases.Get(ctx, cfg.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return leaseError(verb, cfg, err)
	}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return leaseError("update", cfg, err)
	}
	return nil
}

// leaseError says which call on the Lease failed and what to do about it.
func leaseError(verb string, cfg Config, err error) error {
	what := fmt.Sprintf("leader: cannot %s leases.coordination.k8s.io %q in namespace %q", verb, cfg.Name, cfg.Namespace)
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: %w; grant this replica's user get, create and update on leases.coordination.k8s.io in namespace %q (a Role and a RoleBinding)", what, err, cfg.Namespace)
	case verb == "create" && apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w; create namespace %q, or put the Lease in one that exists", what, err, cfg.Namespace)
	}
	return fmt.Errorf("%s: %w", what, err)
}
