package reflector

import (
	"cmp"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxTombstones bounds how many deleted pods an event index remembers, so
// that a relist cannot bring back their events. A pod deleted longer ago
// than the last maxTombstones deletions is assumed to have no events left
// on the server that a relist could deliver before their TTL expires.
const maxTombstones = 10_000

// eventIndex is the index of one event informer, built and owned by that
// informer's handler: the informer's own store is never changed. It keeps,
// per pod (by uid, or by namespace/name for an event without an involved
// uid), at most max events, the newest, oldest first. A pod's deletion
// drops its events and tombstones its uid, so that events the informer
// delivers again later (a relist, a late update) are not indexed again.
// It is safe for concurrent use.
type eventIndex struct {
	max int // per pod; <= 0 means no bound

	mu sync.RWMutex // guards the fields below
	// pods holds each pod's events, by podRef.
	pods map[string]*podEvents
	// byName holds, per namespace/name, the podRefs of pods of that name
	// (more than one while an old pod's events outlive it).
	byName map[string]map[string]struct{}
	// tombs are the uids of deleted pods, tombOrder their deletion order
	// (a ring of maxTombstones, next the slot to overwrite).
	tombs     map[types.UID]struct{}
	tombOrder []types.UID
	next      int
}

// podEvents are one pod's indexed events, oldest first.
type podEvents struct {
	name   string // namespace/name of the pod
	events []*corev1.Event
}

func newEventIndex(max int) *eventIndex {
	return &eventIndex{
		max:    max,
		pods:   map[string]*podEvents{},
		byName: map[string]map[string]struct{}{},
		tombs:  map[types.UID]struct{}{},
	}
}

// podRef names the pod an event is about: its uid, or namespace/name
// when the event has none.
func podRef(e *corev1.Event) string {
	if e.InvolvedObject.UID != "" {
		return string(e.InvolvedObject.UID)
	}
	return podKey(e.InvolvedObject.Namespace, e.InvolvedObject.Name)
}

// eventCompare orders events oldest first, by EventTime, then by name.
func eventCompare(a, b *corev1.Event) int {
	if c := EventTime(a).Compare(EventTime(b)); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// sameEvent reports whether a and b are versions of one event.
func sameEvent(a, b *corev1.Event) bool {
	if a.UID != "" && b.UID != "" {
		return a.UID == b.UID
	}
	return a.Namespace == b.Namespace && a.Name == b.Name
}

// put adds e, or replaces the version of it already indexed (one slot
// per event), then drops the oldest events beyond the bound.
func (x *eventIndex) put(e *corev1.Event) {
	ref := podRef(e)
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, dead := x.tombs[e.InvolvedObject.UID]; dead && e.InvolvedObject.UID != "" {
		return
	}
	p := x.pods[ref]
	if p == nil {
		name := podKey(e.InvolvedObject.Namespace, e.InvolvedObject.Name)
		p = &podEvents{name: name}
		x.pods[ref] = p
		refs := x.byName[name]
		if refs == nil {
			refs = map[string]struct{}{}
			x.byName[name] = refs
		}
		refs[ref] = struct{}{}
	}
	if i := slices.IndexFunc(p.events, func(old *corev1.Event) bool { return sameEvent(old, e) }); i >= 0 {
		p.events = slices.Delete(p.events, i, i+1)
	}
	// Events mostly arrive in time order: search from the end.
	i := len(p.events)
	for i > 0 && eventCompare(p.events[i-1], e) > 0 {
		i--
	}
	p.events = slices.Insert(p.events, i, e)
	if x.max > 0 && len(p.events) > x.max {
		// Shift rather than reslice, so the backing array stays bounded.
		n := copy(p.events, p.events[len(p.events)-x.max:])
		clear(p.events[n:])
		p.events = p.events[:n]
	}
	if len(p.events) == 0 {
		x.dropLocked(ref)
	}
}

// remove forgets e (deleted from the server, by its TTL).
func (x *eventIndex) remove(e *corev1.Event) {
	ref := podRef(e)
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.pods[ref]
	if p == nil {
		return
	}
	p.events = slices.DeleteFunc(p.events, func(old *corev1.Event) bool { return sameEvent(old, e) })
	if len(p.events) == 0 {
		x.dropLocked(ref)
	}
}

// retain drops every event whose namespace/name is not in keep (a
// relist: those are gone from the server).
func (x *eventIndex) retain(keep map[string]struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for ref, p := range x.pods {
		p.events = slices.DeleteFunc(p.events, func(e *corev1.Event) bool {
			_, ok := keep[podKey(e.Namespace, e.Name)]
			return !ok
		})
		if len(p.events) == 0 {
			x.dropLocked(ref)
		}
	}
}

// forgetPod drops the events of a deleted pod and tombstones its uid.
func (x *eventIndex) forgetPod(uid types.UID, namespace, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if uid != "" {
		x.dropLocked(string(uid))
		if _, ok := x.tombs[uid]; !ok {
			if len(x.tombOrder) < maxTombstones {
				x.tombOrder = append(x.tombOrder, uid)
			} else {
				delete(x.tombs, x.tombOrder[x.next])
				x.tombOrder[x.next] = uid
				x.next = (x.next + 1) % maxTombstones
			}
			x.tombs[uid] = struct{}{}
		}
	}
	// Events without an involved uid are known by name only.
	x.dropLocked(podKey(namespace, name))
}

func (x *eventIndex) dropLocked(ref string) {
	p := x.pods[ref]
	if p == nil {
		return
	}
	delete(x.pods, ref)
	if refs := x.byName[p.name]; refs != nil {
		delete(refs, ref)
		if len(refs) == 0 {
			delete(x.byName, p.name)
		}
	}
}

// forUID returns a copy of the events of the pod with uid, oldest first.
func (x *eventIndex) forUID(uid types.UID) []*corev1.Event {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if p := x.pods[string(uid)]; p != nil {
		return slices.Clone(p.events)
	}
	return nil
}

// forPod returns the events of every pod named namespace/name, oldest
// first.
func (x *eventIndex) forPod(namespace, name string) []*corev1.Event {
	key := podKey(namespace, name)
	x.mu.RLock()
	refs := x.byName[key]
	n := len(refs)
	var out []*corev1.Event
	for ref := range refs {
		out = append(out, x.pods[ref].events...)
	}
	x.mu.RUnlock()
	if n > 1 {
		slices.SortStableFunc(out, eventCompare)
	}
	return out
}

// len returns how many events the index holds.
func (x *eventIndex) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for _, p := range x.pods {
		n += len(p.events)
	}
	return n
}
