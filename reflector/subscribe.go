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
	once sync.Once
}

// Subscribe returns a subscription to the pod namespace/name (whether or
// not it exists yet). Close it when done.
func (r *Registry) Subscribe(namespace, name string) *Subscription {
	s := &Subscription{r: r, key: podKey(namespace, name), c: make(chan struct{}, 1)}
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
// blocking. It runs on every pod change and event, so it builds the key
// on the stack: a map lookup by string(bytes) allocates nothing.
func (r *Registry) notify(namespace, name string) {
	var buf [128]byte
	key := append(append(append(buf[:0], namespace...), '/'), name...)
	r.subsMu.Lock()
	defer r.subsMu.Unlock()
	for s := range r.subs[string(key)] {
		select {
		case s.c <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}
