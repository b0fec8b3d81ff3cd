package reflector

import (
	"slices"
	"sync"
)

// observer is one function added with Pods.Observe.
type observer struct{ fn func(pod *Pod, deleted bool) }

// observers are a pod informer's Observe functions, called by the
// Registry's one handler on that informer. A client-go handler of their
// own would cost each a listener: two goroutines, and two goroutine
// hand-offs for every pod change, which on a busy hub's two cores cost
// more than the functions themselves.
type observers struct {
	// mu is held for reading while the functions are called and for
	// writing while the list changes, so that a removed function is
	// never called after its removal returns.
	mu  sync.RWMutex
	fns []*observer // guarded by mu
}

func (o *observers) call(pod *Pod, deleted bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	for _, ob := range o.fns {
		ob.fn(pod, deleted)
	}
}

func (o *observers) add(ob *observer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fns = append(slices.Clip(o.fns), ob)
}

func (o *observers) remove(ob *observer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fns = slices.DeleteFunc(slices.Clone(o.fns), func(x *observer) bool { return x == ob })
}

// Observe calls fn for every pod the informer adds, updates or deletes
// (deleted true) from now on, in the informer's order. It is OnChange
// for controllers on a hot path: fn runs in the Registry's own handler on
// the informer (the one that wakes subscriptions), with no client-go
// listener of its own, so a change costs a function call rather than two
// goroutine hand-offs. In exchange:
//   - Nothing is replayed. fn sees every change delivered after Observe
//     returns and perhaps a few from just before; a caller that needs the
//     pods already cached reads them (List) after Observe returns, and
//     may then see a pod both ways.
//   - fn must be fast and must not block: subscriptions wait for it. It
//     must not change the pod (the cache's own), and must not call
//     remove or the handle's Release.
//
// The returned function removes fn; once it returns, fn is not called
// again. The handle's Release removes it too.
func (p *Pods) Observe(fn func(pod *Pod, deleted bool)) (remove func(), err error) {
	if err := p.h.usable(); err != nil {
		return nil, err
	}
	ob := &observer{fn: fn}
	p.h.obsMu.Lock()
	if p.h.released.Load() {
		p.h.obsMu.Unlock()
		return nil, ErrReleased
	}
	p.h.observed = append(p.h.observed, ob)
	p.h.e.observers.add(ob)
	p.h.obsMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.h.obsMu.Lock()
			defer p.h.obsMu.Unlock()
			if i := slices.Index(p.h.observed, ob); i >= 0 {
				p.h.observed = slices.Delete(p.h.observed, i, i+1)
				p.h.e.observers.remove(ob)
			}
		})
	}, nil
}

// usable is ErrReleased once h is released or its informer has stopped.
func (h *handle) usable() error {
	if h.released.Load() {
		return ErrReleased
	}
	select {
	case <-h.e.done:
		return ErrReleased
	default:
		return nil
	}
}

// removeObservers removes the functions added through h with Observe
// and OnChange (at its Release).
func (h *handle) removeObservers() {
	h.obsMu.Lock()
	defer h.obsMu.Unlock()
	for _, ob := range h.observed {
		h.e.observers.remove(ob)
	}
	for _, reg := range h.handlers {
		_ = h.e.informer.RemoveEventHandler(reg)
	}
	h.observed, h.handlers = nil, nil
}
