package reflector

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Events is one holder's handle on a shared informer for the events of
// pods (field selector involvedObject.kind=Pod). Its methods are safe for
// concurrent use; the events it returns are read-only cache objects.
type Events struct {
	h handle
}

// Events returns a handle on the pod-event informer for namespace ("" for
// all namespaces), starting it if no one holds it yet. Release the handle
// when done.
func (r *Registry) Events(ctx context.Context, namespace string) (*Events, error) {
	e, err := r.acquire(ctx, Key{Resource: ResourceEvents, Namespace: namespace, FieldSelector: eventFieldSelector})
	if err != nil {
		return nil, err
	}
	return &Events{h: handle{r: r, e: e}}, nil
}

// Release gives up this handle. Calling it more than once is harmless;
// every read after it returns ErrReleased.
func (ev *Events) Release() { ev.h.release() }

// WaitForSync waits until the informer has delivered its first list.
func (ev *Events) WaitForSync(ctx context.Context) error { return ev.h.waitSynced(ctx) }

// Namespace is the namespace the informer watches ("" for all).
func (ev *Events) Namespace() string { return ev.h.e.key.Namespace }

// Status returns the informer's health.
func (ev *Events) Status() Status { return ev.h.e.status() }

// Synced reports, without waiting, whether the informer has delivered
// its first list. Cheaper than Status: it counts nothing.
func (ev *Events) Synced() bool { return ev.h.e.synced.Load() || ev.h.e.hasSynced() }

// Denied is Status().Denied without counting the cache: the API server's
// refusal of the informer's calls (a missing RBAC verb), or nil.
func (ev *Events) Denied() error { return ev.h.e.health.status().Denied }

// ForPod returns the indexed events of the pod namespace/name (of every
// pod of that name whose events are still indexed), oldest first: by
// EventTime, else LastTimestamp, else creation time, then by name. It is
// an index lookup, not a scan.
func (ev *Events) ForPod(ctx context.Context, namespace, name string) ([]*corev1.Event, error) {
	if err := ev.h.waitSynced(ctx); err != nil {
		return nil, err
	}
	return ev.h.e.events.forPod(namespace, name), nil
}

// ForUID returns the indexed events of the pod with uid, oldest first. A
// new pod with the same name has another uid, so this never mixes in a
// previous pod's events.
func (ev *Events) ForUID(ctx context.Context, uid types.UID) ([]*corev1.Event, error) {
	if err := ev.h.waitSynced(ctx); err != nil {
		return nil, err
	}
	return ev.h.e.events.forUID(uid), nil
}

// EventTime is when an event last happened: its EventTime (events.k8s.io
// style), else LastTimestamp, else FirstTimestamp, else its creation time.
func EventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// forgetEvents drops the indexed events of a deleted pod from every
// event informer that covers its namespace, and tombstones its uid there,
// so a hub's event index holds the events of live pods only.
func (r *Registry) forgetEvents(uid types.UID, namespace, name string) {
	for _, e := range r.covering(ResourceEvents, namespace) {
		e.events.forgetPod(uid, namespace, name)
	}
}

// covering returns the running informers of resource whose namespace
// holds namespace's objects (namespace's own, or all namespaces').
func (r *Registry) covering(resource Resource, namespace string) []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*entry
	for k, e := range r.entries {
		if k.Resource == resource && (k.Namespace == metav1.NamespaceAll || k.Namespace == namespace) {
			out = append(out, e)
		}
	}
	return out
}

// TransformEvent trims an event to what spawnkit reads: name, namespace,
// uid, resourceVersion and creation time; the involved object; reason,
// message, type, count, source component and the three timestamps.
func TransformEvent(obj any) (any, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:              e.Name,
			Namespace:         e.Namespace,
			UID:               e.UID,
			ResourceVersion:   e.ResourceVersion,
			CreationTimestamp: e.CreationTimestamp,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind:      e.InvolvedObject.Kind,
			Namespace: e.InvolvedObject.Namespace,
			Name:      e.InvolvedObject.Name,
			UID:       e.InvolvedObject.UID,
			FieldPath: e.InvolvedObject.FieldPath,
		},
		Reason:         e.Reason,
		Message:        e.Message,
		Type:           e.Type,
		Count:          e.Count,
		Source:         corev1.EventSource{Component: e.Source.Component},
		FirstTimestamp: e.FirstTimestamp,
		LastTimestamp:  e.LastTimestamp,
		EventTime:      e.EventTime,
	}, nil
}
