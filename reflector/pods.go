package reflector

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

const uidIndex = "uid"

func podUIDIndexFunc(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return []string{string(p.UID)}, nil
	}
	return nil, nil
}

// ErrReleased is returned by a handle used after Release.
var ErrReleased = errors.New("reflector: handle already released")

// Pods is one holder's handle on a shared pod informer. Its methods are
// safe for concurrent use. Pods it returns are the cache's own objects:
// read-only, to be DeepCopied before any change.
type Pods struct {
	r    *Registry
	e    *entry
	once sync.Once
}

// Pods returns a handle on the pod informer for namespace ("" for all
// namespaces) with the registry's pod label selector, starting it if no
// one holds it yet. Release the handle when done. ctx only provides the
// logger; the informer runs until its last holder releases it.
func (r *Registry) Pods(ctx context.Context, namespace string) (*Pods, error) {
	e, err := r.acquire(ctx, Key{Resource: ResourcePods, Namespace: namespace, LabelSelector: r.podSel})
	if err != nil {
		return nil, err
	}
	return &Pods{r: r, e: e}, nil
}

func (r *Registry) podChanged(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if deleted {
		r.forgetEvents(pod.Namespace, pod.Name)
	}
	r.notify(podKey(pod.Namespace, pod.Name))
}

// Release gives up this handle; the informer stops when its last handle
// is released. Calling Release more than once is harmless.
func (p *Pods) Release() {
	p.once.Do(func() { p.r.release(p.e) })
}

// WaitForSync waits until the informer has delivered its first list, or
// ctx ends. Every read waits for this itself.
func (p *Pods) WaitForSync(ctx context.Context) error { return waitSynced(ctx, p.e) }

// Get returns the cached pod, or false when the informer (having synced)
// does not have it. It waits for the first sync, bounded by ctx, so it
// never reports a running pod as missing because the cache was empty.
func (p *Pods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, bool, error) {
	if err := waitSynced(ctx, p.e); err != nil {
		return nil, false, err
	}
	obj, ok, err := p.e.informer.GetIndexer().GetByKey(podKey(namespace, name))
	if err != nil || !ok {
		return nil, false, err
	}
	return obj.(*corev1.Pod), true, nil
}

// GetByUID returns the cached pod with uid.
func (p *Pods) GetByUID(ctx context.Context, uid types.UID) (*corev1.Pod, bool, error) {
	if err := waitSynced(ctx, p.e); err != nil {
		return nil, false, err
	}
	objs, err := p.e.informer.GetIndexer().ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false, err
	}
	return objs[0].(*corev1.Pod), true, nil
}

// List returns every cached pod, in namespace when it is not "" (useful
// on an all-namespaces informer).
func (p *Pods) List(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	if err := waitSynced(ctx, p.e); err != nil {
		return nil, err
	}
	var objs []any
	if namespace == metav1.NamespaceAll {
		objs = p.e.informer.GetIndexer().List()
	} else {
		var err error
		if objs, err = p.e.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace); err != nil {
			return nil, err
		}
	}
	out := make([]*corev1.Pod, len(objs))
	for i, o := range objs {
		out[i] = o.(*corev1.Pod)
	}
	return out, nil
}

// Namespace is the namespace the informer watches ("" for all).
func (p *Pods) Namespace() string { return p.e.key.Namespace }

// Status returns the informer's health.
func (p *Pods) Status() Status { return p.e.status() }

// TransformPod trims a pod before it enters the cache, dropping what
// spawnkit never reads so that a hub with thousands of servers keeps a
// small cache. Kept: all metadata but managedFields; spec.nodeName,
// hostname, subdomain, restartPolicy, and each container's name, image and
// ports; the whole status. Dropped: managedFields, volumes, and each
// container's command, args, env, resources, mounts, probes and security
// context, and the rest of the spec (affinity, tolerations, ...).
func TransformPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	spec := corev1.PodSpec{
		NodeName:      pod.Spec.NodeName,
		Hostname:      pod.Spec.Hostname,
		Subdomain:     pod.Spec.Subdomain,
		RestartPolicy: pod.Spec.RestartPolicy,
	}
	trim := func(cs []corev1.Container) []corev1.Container {
		if len(cs) == 0 {
			return nil
		}
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Image: c.Image, Ports: c.Ports}
		}
		return out
	}
	spec.Containers = trim(pod.Spec.Containers)
	spec.InitContainers = trim(pod.Spec.InitContainers)
	pod.Spec = spec
	return pod, nil
}

// OnChange calls fn for every pod the informer adds, updates or deletes
// (deleted true), starting with an add for every pod already cached. fn
// runs in the informer's goroutine, so it must be fast (enqueue work) and
// must not change the pod, which is the cache's own. The returned
// function removes the handler; the handler also ends with the handle's
// Release.
func (p *Pods) OnChange(fn func(pod *corev1.Pod, deleted bool)) (remove func(), err error) {
	call := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			fn(pod, deleted)
		}
	}
	reg, err := p.e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(obj, false) },
		UpdateFunc: func(_, obj any) { call(obj, false) },
		DeleteFunc: func(obj any) { call(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { _ = p.e.informer.RemoveEventHandler(reg) }) }, nil
}
