package reflector

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	involvedIndex    = "involvedObject"
	involvedUIDIndex = "involvedObject.uid"
)

func involvedIndexFunc(obj any) ([]string, error) {
	if e, ok := obj.(*corev1.Event); ok {
		return []string{podKey(e.InvolvedObject.Namespace, e.InvolvedObject.Name)}, nil
	}
	return nil, nil
}

func involvedUIDIndexFunc(obj any) ([]string, error) {
	if e, ok := obj.(*corev1.Event); ok && e.InvolvedObject.UID != "" {
		return []string{string(e.InvolvedObject.UID)}, nil
	}
	return nil, nil
}

// Events is one holder's handle on a shared informer for the events of
// pods (field selector involvedObject.kind=Pod). Its methods are safe for
// concurrent use; the events it returns are read-only cache objects.
type Events struct {
	r    *Registry
	e    *entry
	once sync.Once
}

// Events returns a handle on the pod-event informer for namespace ("" for
// all namespaces), starting it if no one holds it yet. Release the handle
// when done.
func (r *Registry) Events(ctx context.Context, namespace string) (*Events, error) {
	e, err := r.acquire(ctx, Key{Resource: ResourceEvents, Namespace: namespace, FieldSelector: eventFieldSelector})
	if err != nil {
		return nil, err
	}
	return &Events{r: r, e: e}, nil
}

// Release gives up this handle. Calling it more than once is harmless.
func (ev *Events) Release() { ev.once.Do(func() { ev.r.release(ev.e) }) }

// WaitForSync waits until the informer has delivered its first list.
func (ev *Events) WaitForSync(ctx context.Context) error { return waitSynced(ctx, ev.e) }

// Namespace is the namespace the informer watches ("" for all).
func (ev *Events) Namespace() string { return ev.e.key.Namespace }

// Status returns the informer's health.
func (ev *Events) Status() Status { return ev.e.status() }

// ForPod returns the cached events of the pod namespace/name, oldest first
// (by EventTime, else LastTimestamp, else creation time). It is an index
// lookup, not a scan.
func (ev *Events) ForPod(ctx context.Context, namespace, name string) ([]*corev1.Event, error) {
	return ev.lookup(ctx, involvedIndex, podKey(namespace, name))
}

// ForUID returns the cached events of the pod with uid, oldest first. A
// new pod with the same name has another uid, so this never mixes in a
// previous pod's events.
func (ev *Events) ForUID(ctx context.Context, uid types.UID) ([]*corev1.Event, error) {
	return ev.lookup(ctx, involvedUIDIndex, string(uid))
}

func (ev *Events) lookup(ctx context.Context, index, value string) ([]*corev1.Event, error) {
	if err := waitSynced(ctx, ev.e); err != nil {
		return nil, err
	}
	objs, err := ev.e.informer.GetIndexer().ByIndex(index, value)
	if err != nil {
		return nil, err
	}
	return sortedEvents(objs), nil
}

func sortedEvents(objs []any) []*corev1.Event {
	out := make([]*corev1.Event, len(objs))
	for i, o := range objs {
		out[i] = o.(*corev1.Event)
	}
	slices.SortStableFunc(out, func(a, b *corev1.Event) int {
		if c := EventTime(a).Compare(EventTime(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
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

// eventChanged runs in the informer's handler: it enforces the per-pod
// bound and wakes the pod's subscribers.
func (r *Registry) eventChanged(e *entry, obj any) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	key := podKey(ev.InvolvedObject.Namespace, ev.InvolvedObject.Name)
	if r.maxEvent > 0 {
		indexer := e.informer.GetIndexer()
		objs, err := indexer.ByIndex(involvedIndex, key)
		if err == nil && len(objs) > r.maxEvent {
			for _, old := range sortedEvents(objs)[:len(objs)-r.maxEvent] {
				// Removing an entry (never changing one) is how the bound
				// is kept; a later update of that event adds it again.
				_ = indexer.Delete(old)
			}
		}
	}
	r.notify(key)
}

// forgetEvents drops the cached events of a deleted pod from every event
// informer that covers its namespace, so a hub's event cache holds the
// events of live pods only.
func (r *Registry) forgetEvents(namespace, name string) {
	r.mu.Lock()
	var entries []*entry
	for k, e := range r.entries {
		if k.Resource == ResourceEvents && (k.Namespace == metav1.NamespaceAll || k.Namespace == namespace) {
			entries = append(entries, e)
		}
	}
	r.mu.Unlock()
	for _, e := range entries {
		indexer := e.informer.GetIndexer()
		objs, err := indexer.ByIndex(involvedIndex, podKey(namespace, name))
		if err != nil {
			continue
		}
		for _, o := range objs {
			_ = indexer.Delete(o)
		}
	}
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
