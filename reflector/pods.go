package reflector

import (
	"context"
	"errors"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// ErrReleased is returned by every read of a handle (Pods, Events) after
// its Release or after Registry.Close.
var ErrReleased = errors.New("reflector: handle already released")

// Pods is one holder's handle on a shared pod informer. Its methods are
// safe for concurrent use. Pods it returns are the cache's own objects
// (the compact Pod, see the cache contract): read-only.
type Pods struct {
	h handle
}

// Pods returns a handle on the pod informer for namespace ("" for all
// namespaces) with the registry's pod label selector, starting it if no
// one holds it yet. Release the handle when done. ctx only provides the
// logger; the informer runs until its last holder releases it or the
// registry is closed.
func (r *Registry) Pods(ctx context.Context, namespace string) (*Pods, error) {
	e, err := r.acquire(ctx, Key{Resource: ResourcePods, Namespace: namespace, LabelSelector: r.podSel})
	if err != nil {
		return nil, err
	}
	return &Pods{h: handle{r: r, e: e}}, nil
}

// podChanged is the Registry's handler on a pod informer: old is the
// cached version an update replaces (nil for an add or a deletion).
func (r *Registry) podChanged(e *entry, old, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*Pod)
	if !ok {
		return
	}
	e.uids.observe(pod, deleted)
	prev, _ := old.(*Pod)
	if deleted {
		r.forgetEvents(pod.UID, pod.Namespace, pod.Name)
	} else if prev == nil {
		// A pod new to the cache: the events that came before it.
		r.adoptEvents(pod.UID, pod.Namespace)
	}
	r.notifyPod(e, prev, pod, deleted)
	e.observers.call(pod, deleted)
}

// Release gives up this handle; the informer stops when its last handle
// is released. Calling Release more than once is harmless; every read
// after it returns ErrReleased.
func (p *Pods) Release() { p.h.release() }

// WaitForSync waits until the informer has delivered its first list, or
// ctx ends. Every read waits for this itself.
func (p *Pods) WaitForSync(ctx context.Context) error { return p.h.waitSynced(ctx) }

// Get returns the cached pod, or false when the informer (having synced)
// does not have it. It waits for the first sync, bounded by ctx, so it
// never reports a running pod as missing because the cache was empty.
func (p *Pods) Get(ctx context.Context, namespace, name string) (*Pod, bool, error) {
	return p.GetByKey(ctx, podKey(namespace, name))
}

// PodKey is the key of the pod namespace/name, for GetByKey.
func PodKey(namespace, name string) string { return podKey(namespace, name) }

// GetByKey is Get by the pod's key (PodKey), for a caller that reads the
// same pod often and builds its key once: it allocates nothing.
func (p *Pods) GetByKey(ctx context.Context, key string) (*Pod, bool, error) {
	if err := p.h.waitSynced(ctx); err != nil {
		return nil, false, err
	}
	obj, ok, err := p.h.e.informer.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		return nil, false, err
	}
	return obj.(*Pod), true, nil
}

// GetByUID returns the cached pod with uid, or false when the informer
// (having synced) does not have it. Like Get it never misses a cached
// pod: a pod the handler's uid map has not seen yet is found by a scan.
func (p *Pods) GetByUID(ctx context.Context, uid types.UID) (*Pod, bool, error) {
	if err := p.h.waitSynced(ctx); err != nil {
		return nil, false, err
	}
	indexer := p.h.e.informer.GetIndexer()
	if seen := p.h.e.uids.get(uid); seen != nil {
		obj, ok, err := indexer.GetByKey(podKey(seen.Namespace, seen.Name))
		if err != nil {
			return nil, false, err
		}
		if pod, _ := obj.(*Pod); ok && pod.UID == uid {
			return pod, true, nil
		}
	}
	for _, obj := range indexer.List() {
		if pod := obj.(*Pod); pod.UID == uid {
			return pod, true, nil
		}
	}
	return nil, false, nil
}

// List returns every cached pod, in namespace when it is not "" (useful
// on an all-namespaces informer).
func (p *Pods) List(ctx context.Context, namespace string) ([]*Pod, error) {
	if err := p.h.waitSynced(ctx); err != nil {
		return nil, err
	}
	var objs []any
	// An informer on namespace holds only its pods: listing the store is
	// cheaper than going through the namespace index (a map lookup per pod).
	if namespace == metav1.NamespaceAll || namespace == p.h.e.key.Namespace {
		objs = p.h.e.informer.GetIndexer().List()
	} else {
		var err error
		if objs, err = p.h.e.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace); err != nil {
			return nil, err
		}
	}
	out := make([]*Pod, len(objs))
	for i, o := range objs {
		out[i] = o.(*Pod)
	}
	return out, nil
}

// Namespace is the namespace the informer watches ("" for all).
func (p *Pods) Namespace() string { return p.h.e.key.Namespace }

// Status returns the informer's health.
func (p *Pods) Status() Status { return p.h.e.status() }

// TransformPod turns a *corev1.Pod into the *Pod the cache keeps
// (NewPod), so that a hub with thousands of servers keeps a small cache.
// A *Pod, the transform's own output, is returned as it is (client-go may
// hand the transform objects it has already transformed), and so is any
// other object. The Registry's pod informers use it in a form that also
// reads the pod's cached version (an update shares its unchanged
// metadata, see NewPod); the result is the same.
func TransformPod(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return NewPod(pod), nil
	}
	return obj, nil
}

// OnChange calls fn for every pod the informer adds, updates or deletes
// (deleted true), starting with an add for every pod already cached. fn
// runs in the informer's goroutine, so it must be fast (enqueue work) and
// must not change the pod, which is the cache's own. The returned
// function removes the handler; the handle's Release removes it too.
func (p *Pods) OnChange(fn func(pod *Pod, deleted bool)) (remove func(), err error) {
	if err := p.h.usable(); err != nil {
		return nil, err
	}
	call := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pod, ok := obj.(*Pod); ok {
			fn(pod, deleted)
		}
	}
	p.h.obsMu.Lock()
	defer p.h.obsMu.Unlock()
	if p.h.released.Load() {
		return nil, ErrReleased
	}
	reg, err := p.h.e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(obj, false) },
		UpdateFunc: func(_, obj any) { call(obj, false) },
		DeleteFunc: func(obj any) { call(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	p.h.handlers = append(p.h.handlers, reg)
	var once sync.Once
	return func() {
		once.Do(func() {
			p.h.obsMu.Lock()
			defer p.h.obsMu.Unlock()
			if i := slices.Index(p.h.handlers, reg); i >= 0 {
				p.h.handlers = slices.Delete(p.h.handlers, i, i+1)
				_ = p.h.e.informer.RemoveEventHandler(reg)
			}
		})
	}, nil
}
