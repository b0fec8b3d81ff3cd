package spawner

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/reflector"
)

// startEvents returns a hold, for one start or resume (the caller
// releases it when the operation ends), on the event informer of ns, or
// with enable_user_namespaces on the one informer of all namespaces, so
// that a hub watches events once, however many users it has.
func (s *Spawner) startEvents(ctx context.Context, ns string) (*reflector.Events, error) {
	if s.b.watchAll {
		ns = metav1.NamespaceAll
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return s.b.registry.Events(ctx, ns)
}

// podsHandle returns the Spawner's hold on the pod informer of ns, or
// with enable_user_namespaces on the one informer of all namespaces (the
// Manager's), so that a hub watches pods once, however many users it has.
func (s *Spawner) podsHandle(ctx context.Context, ns string) (*reflector.Pods, error) {
	return holdOn(ctx, s, &s.pods, ns, s.b.registry.Pods)
}

// informer is a Registry handle on the shared informer of one namespace.
type informer interface {
	Namespace() string
	Release()
}

// hold is a Spawner's hold on a shared informer (guarded by Spawner.mu):
// kept from first use until Close or a move to another namespace.
type hold[T informer] struct {
	h  T
	ok bool
}

// current is the held handle when it is of namespace ns.
func (h *hold[T]) current(ns string) (T, bool) {
	if h.ok && h.h.Namespace() == ns {
		return h.h, true
	}
	var zero T
	return zero, false
}

// take empties the hold, returning what it held.
func (h *hold[T]) take() (T, bool) {
	held, ok := h.h, h.ok
	*h = hold[T]{}
	return held, ok
}

// holdOn returns s's hold on the informer of ns (all namespaces with
// enable_user_namespaces or a templated retired namespace: watchAll),
// acquiring it and releasing the one it replaces.
func holdOn[T informer](ctx context.Context, s *Spawner, h *hold[T], ns string, acquire func(context.Context, string) (T, error)) (T, error) {
	var zero T
	if s.b.watchAll {
		ns = metav1.NamespaceAll
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return zero, ErrClosed
	}
	if cur, ok := h.current(ns); ok {
		s.mu.Unlock()
		return cur, nil
	}
	got, err := acquire(ctx, ns)
	if err != nil {
		s.mu.Unlock()
		return zero, err
	}
	old, had := h.take()
	h.h, h.ok = got, true
	s.mu.Unlock()
	if had {
		old.Release() // without s.mu, as in Close
	}
	return got, nil
}

// podsHandleAfterClose is podsHandle, except that after Close (whose
// cancellation a cleanup is finishing) it takes a short-lived hold of its
// own; the caller calls release when done.
func (s *Spawner) podsHandleAfterClose(ctx context.Context, ns string) (*reflector.Pods, func(), error) {
	p, err := s.podsHandle(ctx, ns)
	if errors.Is(err, ErrClosed) {
		if s.b.watchAll {
			ns = metav1.NamespaceAll // the informer podsHandle would take
		}
		p, err = s.b.registry.Pods(ctx, ns)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Release, nil
	}
	return p, func() {}, err
}
