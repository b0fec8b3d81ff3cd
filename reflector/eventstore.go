package reflector

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// maxPendingEvents bounds the events an event store holds for pods no
// pod informer of the Registry has (yet): a pod's first events can come
// before the pod does, and those of pods spawnkit does not manage never
// find one. About 1 KiB each.
const maxPendingEvents = 1024

// eventStore is the store client-go's reflector lists and watches events
// into: there is no informer store behind it, so an event costs memory
// only if it is kept. It keeps, in the bounded per-pod index, the events
// of pods a pod informer of the Registry caches (spawnkit's server pods,
// by the Registry's label selector), and holds those of other pods only
// in a small bounded queue until their pod appears. An event about
// anything but a pod is dropped. So memory follows the servers, not the
// namespace's event count (KubeSpawner #913: a hub out of memory at
// 35,000 events).
type eventStore struct {
	x *eventIndex
	// admit reports whether the registry caches the pod of uid in
	// namespace, or cannot tell (no synced pod informer covers it).
	admit   func(namespace string, uid types.UID) bool
	changed func(*corev1.Event)

	mu      sync.Mutex // guards pending and order
	pending map[types.UID][]*corev1.Event
	order   []types.UID // one entry per pending event, oldest first
	synced  chan struct{}
	once    sync.Once
}

func newEventStore(x *eventIndex, admit func(string, types.UID) bool, changed func(*corev1.Event)) *eventStore {
	return &eventStore{x: x, admit: admit, changed: changed, pending: map[types.UID][]*corev1.Event{}, synced: make(chan struct{})}
}

// Transformer makes the reflector's own temporary store (a streamed
// initial list) hold trimmed events too.
func (s *eventStore) Transformer() cache.TransformFunc { return TransformEvent }

func (s *eventStore) Add(obj any) error    { s.put(obj); return nil }
func (s *eventStore) Update(obj any) error { s.put(obj); return nil }
func (s *eventStore) Resync() error        { return nil }

func (s *eventStore) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if e, ok := obj.(*corev1.Event); ok {
		s.x.remove(e)
	}
	return nil
}

// Replace is a (re)list: what the index holds that the list does not is
// gone from the server; the rest is put again.
func (s *eventStore) Replace(list []any, _ string) error {
	keep := make(map[string]struct{}, len(list))
	for _, obj := range list {
		if e, ok := obj.(*corev1.Event); ok {
			keep[podKey(e.Namespace, e.Name)] = struct{}{}
		}
	}
	s.x.retain(keep)
	// Notified as the informer's handler would be for a list: a start
	// waiting through a relist hears of the events it brings.
	for _, obj := range list {
		s.put(obj)
	}
	s.once.Do(func() { close(s.synced) })
	return nil
}

// hasSynced reports whether the first list has been stored.
func (s *eventStore) hasSynced() bool {
	select {
	case <-s.synced:
		return true
	default:
		return false
	}
}

func (s *eventStore) put(obj any) {
	raw, ok := obj.(*corev1.Event)
	if !ok || raw.InvolvedObject.Kind != "Pod" {
		return
	}
	t, _ := TransformEvent(raw)
	e := t.(*corev1.Event)
	if uid := e.InvolvedObject.UID; uid != "" {
		// The check and the hold under one lock: a pod informer adds a
		// pod to its uid map before it adopts the pod's held events
		// (under the same lock), so an event is either admitted here or
		// held before that adoption looks, never lost in between.
		s.mu.Lock()
		if !s.admit(e.InvolvedObject.Namespace, uid) {
			s.holdLocked(uid, e)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	s.x.put(e)
	s.changed(e)
}

// holdLocked (s.mu held) keeps e until its pod appears (adopt), dropping
// the oldest held event beyond maxPendingEvents.
func (s *eventStore) holdLocked(uid types.UID, e *corev1.Event) {
	held := s.pending[uid]
	for i, old := range held {
		if sameEvent(old, e) {
			held[i] = e
			return
		}
	}
	s.pending[uid] = append(held, e)
	s.order = append(s.order, uid)
	for len(s.order) > maxPendingEvents {
		oldest := s.order[0]
		s.order = s.order[1:]
		if h := s.pending[oldest]; len(h) > 1 {
			s.pending[oldest] = h[1:]
		} else {
			delete(s.pending, oldest)
		}
	}
	if cap(s.order) > 4*maxPendingEvents {
		s.order = append([]types.UID(nil), s.order...) // let the head's array go
	}
}

// adopt moves the held events of a pod that a pod informer now caches
// into the index, and wakes their subscribers.
func (s *eventStore) adopt(uid types.UID) {
	s.mu.Lock()
	held := s.pending[uid]
	delete(s.pending, uid)
	if len(held) > 0 {
		order := s.order[:0]
		for _, u := range s.order {
			if u != uid {
				order = append(order, u)
			}
		}
		s.order = order
	}
	s.mu.Unlock()
	for _, e := range held {
		s.x.put(e)
		s.changed(e)
	}
}

// pendingLen is how many events are held.
func (s *eventStore) pendingLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

// podCached reports whether a pod informer of r covering namespace has
// the pod of uid, or true when no synced one covers it (nothing can tell
// a server's pod from another's then, so every pod's events are kept, as
// before the filter).
func (r *Registry) podCached(namespace string, uid types.UID) bool {
	judged := false
	for _, e := range r.covering(ResourcePods, namespace) {
		if e.uids.get(uid) != nil {
			return true
		}
		judged = judged || e.synced.Load() || e.hasSynced()
	}
	return !judged
}

// adoptEvents hands a pod a pod informer now caches its held events.
func (r *Registry) adoptEvents(uid types.UID, namespace string) {
	for _, e := range r.covering(ResourceEvents, namespace) {
		e.store.adopt(uid)
	}
}
