package reflector

import "sync"

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
}

// Subscribe returns a subscription to the pod namespace/name (whether or
// not it exists yet). Close it when done.
func (r *Registry) Subscribe(namespace, name string) *Subscription {
	return r.SubscribeIf(namespace, name, nil)
}

// SubscribeIf is Subscribe for a holder that cares about some of a pod's
// changes only: an update of the pod wakes it only if wake(old, new)
// reports true, old being the version the cache held before (after a
// relist, possibly another pod of the same name: compare uids). The pod's
// add and deletion, and every event about it, always wake it. A holder
// wakes less often (each wake-up is a goroutine hand-off, which on a busy
// hub's two cores costs more than reading the cache), but still reads
// the current state when it wakes: wake decides when to look, not what
// is seen. wake runs in the informer's handler, for every update of the
// pod while subscribed: it must be fast, must not block and must not
// change the pods. A nil wake is Subscribe.
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

// notify wakes the subscribers of the pod namespace/name without
// blocking, for an event about it.
func (r *Registry) notify(namespace, name string) { r.notifyPod(namespace, name, nil, nil) }

// notifyPod wakes the subscribers of the pod namespace/name without
// blocking: all of them for an add, a deletion or an event (old nil),
// and for an update (old the cached version before, updated the new one)
// those whose wake says so. It runs on every pod change and event, so it
// builds the key on the stack: a map lookup by string(bytes) allocates
// nothing.
func (r *Registry) notifyPod(namespace, name string, old, updated *Pod) {
	var buf [128]byte
	key := append(append(append(buf[:0], namespace...), '/'), name...)
	r.subsMu.Lock()
	defer r.subsMu.Unlock()
	for s := range r.subs[string(key)] {
		if old != nil && s.wake != nil && !s.wake(old, updated) {
			continue
		}
		select {
		case s.c <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}
