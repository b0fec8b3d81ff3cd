package orphan

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// DefaultMinAge is how old an object must be before Cleanup deletes it:
// a server being started right now must never be touched.
const DefaultMinAge = 10 * time.Minute

// NoMinAge, as CleanupOptions.MinAge, deletes objects of any age.
const NoMinAge time.Duration = -1

// DefaultCleanupKinds are the kinds Cleanup deletes unless told otherwise:
// claims hold users' data and namespaces everything in them, so they are
// deleted only when asked for by kind.
var DefaultCleanupKinds = []Kind{KindPod, KindSecret, KindService}

// CleanupOptions configure Cleanup. Client is required.
type CleanupOptions struct {
	Client kubernetes.Interface
	// Cluster names the cluster Client talks to (Options.Cluster). Every
	// orphan's Cluster must equal it: an orphan listed in another cluster
	// is an error, so that it is never deleted through this client. With
	// several clusters, call Cleanup once per cluster with its client and
	// the orphans List returned for it. Default "": one unnamed cluster.
	Cluster string
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// MinAge skips younger objects. Zero means DefaultMinAge; NoMinAge
	// turns the check off; any other negative value is an error.
	MinAge time.Duration
	// Kinds to delete. Default: DefaultCleanupKinds. A kind not in
	// AllKinds is an error.
	Kinds []Kind
	// IncludeUnattributed also deletes objects with spawnkit's label but
	// without the annotations that name their server (skipped by default).
	IncludeUnattributed bool
	// GracePeriod for deleting pods. Default: the pod's own.
	GracePeriod *int64
	// Concurrency bounds the deletes in flight. Default: 8.
	Concurrency int
	// Clock judges ages. Default: the real clock.
	Clock clock.PassiveClock
}

// Report says what Cleanup did with each orphan.
type Report struct {
	Deleted []Orphan
	Skipped []Skipped
	Failed  []Failed
}

// Skipped is an orphan Cleanup left alone, and why.
type Skipped struct {
	Orphan Orphan
	Reason string
}

// Failed is an orphan whose delete failed.
type Failed struct {
	Orphan Orphan
	Err    error
}

// Cleanup deletes orphans found by List. Every delete carries the UID and
// resourceVersion List saw as preconditions, so an object re-created or
// changed since then is skipped, never deleted; one already gone is
// skipped as "already gone", so concurrent Cleanups of one list do not
// fail. Deletes run concurrently, at most Concurrency at a time. An
// orphan listed in another cluster than opts.Cluster is an error wrapping
// ErrInvalidOptions, returned before anything is deleted.
func Cleanup(ctx context.Context, orphans []Orphan, opts CleanupOptions) (Report, error) {
	if opts.Client == nil {
		return Report{}, fmt.Errorf("orphan: CleanupOptions needs a Client")
	}
	for _, o := range orphans {
		if o.Cluster != opts.Cluster {
			return Report{}, fmt.Errorf("%w: %s was listed in cluster %q, and CleanupOptions.Cluster is %q: "+
				"call Cleanup once per cluster, with that cluster's client and the orphans listed there",
				ErrInvalidOptions, o, o.Cluster, opts.Cluster)
		}
	}
	if err := checkMinAge(opts.MinAge); err != nil {
		return Report{}, err
	}
	if err := checkKinds("CleanupOptions.Kinds", opts.Kinds); err != nil {
		return Report{}, err
	}
	if opts.MinAge == 0 {
		opts.MinAge = DefaultMinAge
	}
	if len(opts.Kinds) == 0 {
		opts.Kinds = DefaultCleanupKinds
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	now := opts.Clock.Now()

	var mu sync.Mutex // guards report
	var report Report
	skip := func(o Orphan, why string) {
		mu.Lock()
		report.Skipped = append(report.Skipped, Skipped{o, why})
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Concurrency)
	for _, o := range orphans {
		switch {
		case !slices.Contains(opts.Kinds, o.Kind):
			skip(o, fmt.Sprintf("kind %s not included", o.Kind))
			continue
		case !o.Attributed && !opts.IncludeUnattributed:
			skip(o, "unattributed (no user/server annotations)")
			continue
		case opts.MinAge > 0 && o.Age(now) < opts.MinAge:
			skip(o, fmt.Sprintf("younger than %s", opts.MinAge))
			continue
		case opts.DryRun:
			skip(o, "dry run")
			continue
		}
		g.Go(func() error {
			err := deleteOne(gctx, opts, o)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				report.Deleted = append(report.Deleted, o)
			case apierrors.IsNotFound(err):
				report.Skipped = append(report.Skipped, Skipped{o, "already gone"})
			case apierrors.IsConflict(err):
				report.Skipped = append(report.Skipped, Skipped{o, "changed or re-created since listed"})
			default:
				report.Failed = append(report.Failed, Failed{o, err})
			}
			return nil // one failure does not stop the others
		})
	}
	_ = g.Wait()
	return report, ctx.Err()
}

func deleteOne(ctx context.Context, opts CleanupOptions, o Orphan) error {
	del := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(o.UID), ResourceVersion: ptr.To(o.ResourceVersion)}}
	core := opts.Client.CoreV1()
	switch o.Kind {
	case KindPod:
		del.GracePeriodSeconds = opts.GracePeriod
		return core.Pods(o.Namespace).Delete(ctx, o.Name, del)
	case KindPVC:
		return core.PersistentVolumeClaims(o.Namespace).Delete(ctx, o.Name, del)
	case KindSecret:
		return core.Secrets(o.Namespace).Delete(ctx, o.Name, del)
	case KindService:
		return core.Services(o.Namespace).Delete(ctx, o.Name, del)
	case KindNamespace:
		return core.Namespaces().Delete(ctx, o.Name, del)
	}
	return fmt.Errorf("orphan: unknown kind %q", o.Kind)
}
