package reflector

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Subscription wakes its holder when one pod, or an event about it,
// changes in any informer of the registry. Wake-ups are coalesced: a
// holder that is busy while several changes happen is woken once, and
// then reads the current state from the cache. The informers never wait
// for a subscriber.
type Subscription struct {
	r    *Registry
	key  string
	c    chan struct{}
	wake func(old, new *Pod) bool // nil: every change wakes
	once sync.Once
	// seen are the pods of this name the Registry's pod informers have
	// added, updated or deleted since the subscription was made, the
	// latest last, at most maxSeen of them; guarded by r.subsMu.
	seen []seenPod

	evMu    sync.Mutex               // guards onEvent; held while it runs
	onEvent func(*corev1.Event) bool // nil: every event wakes
}

// seenPod is a pod uid one informer has had.
type seenPod struct {
	informer *entry
	uid      types.UID
}

// maxSeen bounds a subscription's seen pods: a holder asks about the one
// pod it made, and more than a few pods of one name in its lifetime means
// someone else is churning them.
const maxSeen = 8

// Subscribe returns a subscription to the pod namespace/name (whether or
// not it exists yet). Close it when done.
func (r *Registry) Subscribe(namespace, name string) *Subscription {
	return r.SubscribeIf(namespace, name, nil)
}

// SubscribeIf is Subscribe for a holder that cares about some of a pod's
// changes only: an update of the pod wakes it only if wake(old, new)
// reports true, old being the version the cache held before (after a
// relist, possibly another pod of the same name: compare uids), and an
// add only if wake(nil, new) does. The pod's deletion always wakes it, and
// so does every event about it unless OnEvent says otherwise. A holder
// wakes less often (each wake-up is a
// goroutine hand-off, which on a busy hub's two cores costs more than
// reading the cache), but still reads the current state when it wakes:
// wake decides when to look, not what is seen. A holder whose adds do not
// wake it learns that the cache had its pod from Seen. wake runs in the
// informer's handler, for every add and update of the pod while
// subscribed: it must be fast, must not block and must not change the
// pods. A nil wake is Subscribe.
func (r *Registry) SubscribeIf(namespace, name string, wake func(old, new *Pod) bool) *Subscription {
	s := &Subscription{r: r, key: podKey(namespace, name), c: make(chan struct{}, 1), wake: wake}
	r.subsMu.Lock()
	defer r.subsMu.Unlock()
	set := r.subs[s.key]
	if set == nil {
		set = map[*Subscription]struct{}{}
		r.subs[s.key] = set
	}
	set[s] = struct{}{}
	return s
}

// C receives a value after each change (coalesced). It is never closed.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Close ends the subscription. Calling it more than once is harmless.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.r.subsMu.Lock()
		defer s.r.subsMu.Unlock()
		if set := s.r.subs[s.key]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(s.r.subs, s.key)
			}
		}
	})
}

// OnEvent sets fn to see every event about the pod that the Registry's
// event informers add or update while subscribed, in the informer's
// handler, before the holder would be woken: fn reports whether the
// event wakes the holder. A holder that handles events in fn (forwards
// them to a progress stream, say) need not wake for them. With no fn (the
// default, or OnEvent(nil)) every event wakes the holder. fn must be
// fast, must not block and must not call the Subscription's methods;
// once OnEvent returns, the fn it replaced is no longer called.
func (s *Subscription) OnEvent(fn func(*corev1.Event) bool) {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.onEvent = fn
}

// Seen reports whether pods' informer has added, updated or deleted a pod
// of this name with uid since the subscription was made, whether or not
// the change woke the holder (of the last 8 pods of the name that the
// Registry's pod informers have had). An informer changes its cache
// before its subscribers hear of it, so a holder that calls Seen and then
// reads the same informer (pods) reads a state at least as new as the one
// Seen reported on: Seen true and the pod missing from pods' cache means
// it was deleted. Another informer of the Registry (the same pods seen
// through an all-namespaces informer, say) may be ahead of pods, which is
// why Seen asks about one.
func (s *Subscription) Seen(pods *Pods, uid types.UID) bool {
	s.r.subsMu.Lock()
	defer s.r.subsMu.Unlock()
	return slices.Contains(s.seen, seenPod{pods.h.e, uid})
}

// sawLocked records that informer has had the pod uid (r.subsMu held).
func (s *Subscription) sawLocked(informer *entry, uid types.UID) {
	p := seenPod{informer, uid}
	if uid == "" || (len(s.seen) > 0 && s.seen[len(s.seen)-1] == p) {
		return
	}
	s.seen = slices.DeleteFunc(s.seen, func(q seenPod) bool { return q == p })
	if len(s.seen) == maxSeen {
		s.seen = slices.Delete(s.seen, 0, 1)
	}
	s.seen = append(s.seen, p)
}

// notifyEvent wakes the subscribers of the pod an event is about without
// blocking, those with an OnEvent function if it says so. The functions
// run outside r.subsMu, which every pod change of every user takes.
func (r *Registry) notifyEvent(ev *corev1.Event) {
	var buf [128]byte
	key := append(append(append(buf[:0], ev.InvolvedObject.Namespace...), '/'), ev.InvolvedObject.Name...)
	var subs [4]*Subscription // a pod has one subscriber or two; more go on the heap
	r.subsMu.Lock()
	found := subs[:0]
	for s := range r.subs[string(key)] {
		found = append(found, s)
	}
	r.subsMu.Unlock()
	for _, s := range found {
		s.evMu.Lock()
		wake := s.onEvent == nil || s.onEvent(ev)
		s.evMu.Unlock()
		if wake {
			select {
			case s.c <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
}

// notifyPod wakes the subscribers of the pod namespace/name without
// blocking: all of them for a deletion, and for an add (old nil) or an
// update (old the cached version before, updated the new one) those whose
// wake says so. It records in each that informer has had the pod. It
// runs on every pod change, so it builds the key on the stack: a map
// lookup by string(bytes) allocates nothing.
func (r *Registry) notifyPod(informer *entry, old, updated *Pod, deleted bool) {
	var buf [128]byte
	key := append(append(append(buf[:0], updated.Namespace...), '/'), updated.Name...)
	r.subsMu.Lock()
	defer r.subsMu.Unlock()
	for s := range r.subs[string(key)] {
		s.sawLocked(informer, updated.UID)
		if !deleted && s.wake != nil && !s.wake(old, updated) {
			continue
		}
		select {
		case s.c <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}
