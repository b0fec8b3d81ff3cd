package reflector

import (
	"context"
	"errors"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// ErrReleased is returned by every read of a handle (Pods, Events) after
// its Release or after Registry.Close.
var ErrReleased = errors.New("reflector: handle already released")

// Pods is one holder's handle on a shared pod informer. Its methods are
// safe for concurrent use. Pods it returns are the cache's own objects:
// read-only, to be DeepCopied before any change.
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

func (r *Registry) podChanged(e *entry, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	e.uids.observe(pod, deleted)
	if deleted {
		r.forgetEvents(pod.UID, pod.Namespace, pod.Name)
	}
	r.notify(podKey(pod.Namespace, pod.Name))
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
func (p *Pods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, bool, error) {
	return p.GetByKey(ctx, podKey(namespace, name))
}

// PodKey is the key of the pod namespace/name, for GetByKey.
func PodKey(namespace, name string) string { return podKey(namespace, name) }

// GetByKey is Get by the pod's key (PodKey), for a caller that reads the
// same pod often and builds its key once: it allocates nothing.
func (p *Pods) GetByKey(ctx context.Context, key string) (*corev1.Pod, bool, error) {
	if err := p.h.waitSynced(ctx); err != nil {
		return nil, false, err
	}
	obj, ok, err := p.h.e.informer.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		return nil, false, err
	}
	return obj.(*corev1.Pod), true, nil
}

// GetByUID returns the cached pod with uid, or false when the informer
// (having synced) does not have it. Like Get it never misses a cached
// pod: a pod the handler's uid map has not seen yet is found by a scan.
func (p *Pods) GetByUID(ctx context.Context, uid types.UID) (*corev1.Pod, bool, error) {
	if err := p.h.waitSynced(ctx); err != nil {
		return nil, false, err
	}
	indexer := p.h.e.informer.GetIndexer()
	if seen := p.h.e.uids.get(uid); seen != nil {
		obj, ok, err := indexer.GetByKey(podKey(seen.Namespace, seen.Name))
		if err != nil {
			return nil, false, err
		}
		if pod, _ := obj.(*corev1.Pod); ok && pod.UID == uid {
			return pod, true, nil
		}
	}
	for _, obj := range indexer.List() {
		if pod := obj.(*corev1.Pod); pod.UID == uid {
			return pod, true, nil
		}
	}
	return nil, false, nil
}

// List returns every cached pod, in namespace when it is not "" (useful
// on an all-namespaces informer).
func (p *Pods) List(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	if err := p.h.waitSynced(ctx); err != nil {
		return nil, err
	}
	var objs []any
	if namespace == metav1.NamespaceAll {
		objs = p.h.e.informer.GetIndexer().List()
	} else {
		var err error
		if objs, err = p.h.e.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace); err != nil {
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
func (p *Pods) Namespace() string { return p.h.e.key.Namespace }

// Status returns the informer's health.
func (p *Pods) Status() Status { return p.h.e.status() }

// TransformPod trims a pod before it enters the cache to what spawnkit
// and its documented hooks read (the cache contract, see the package
// documentation), so that a hub with thousands of servers keeps a small
// cache. Kept: name, namespace, uid, resourceVersion, creation and
// deletion timestamps, labels, annotations and owner references;
// spec.nodeName and each container's name and ports (not init
// containers'); status phase, reason, message, podIP, podIPs, hostIP, the
// PodReady and PodScheduled conditions (type, status, reason, message,
// last transition) and each container's and init container's status
// (name, state, ready, restartCount). Everything else is dropped:
// managedFields, images, volumes, env, resources, probes, the other
// conditions (Initialized, ContainersReady, PodReadyToStartContainers),
// the rest of the spec and status. Strings that many pods share (kind and
// apiVersion, label and annotation keys, port names and protocols,
// condition types, reasons) are interned.
func TransformPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: intern(pod.Kind), APIVersion: intern(pod.APIVersion)},
		ObjectMeta: metav1.ObjectMeta{
			Name:                       pod.Name,
			Namespace:                  intern(pod.Namespace),
			UID:                        pod.UID,
			ResourceVersion:            pod.ResourceVersion,
			CreationTimestamp:          pod.CreationTimestamp,
			DeletionTimestamp:          pod.DeletionTimestamp,
			DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
			Labels:                     internMap(pod.Labels),
			Annotations:                internMap(pod.Annotations),
			OwnerReferences:            pod.OwnerReferences,
		},
		Spec: corev1.PodSpec{
			NodeName:   intern(pod.Spec.NodeName),
			Containers: trimContainers(pod.Spec.Containers),
		},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodPhase(intern(string(pod.Status.Phase))),
			Reason:                intern(pod.Status.Reason),
			Message:               pod.Status.Message,
			PodIP:                 pod.Status.PodIP,
			HostIP:                intern(pod.Status.HostIP),
			ContainerStatuses:     trimStatuses(pod.Status.ContainerStatuses),
			InitContainerStatuses: trimStatuses(pod.Status.InitContainerStatuses),
		},
	}
	if ips := pod.Status.PodIPs; len(ips) > 0 {
		out.Status.PodIPs = make([]corev1.PodIP, len(ips))
		for i, ip := range ips {
			// The first is podIP: share its string.
			if ip.IP == out.Status.PodIP {
				ip.IP = out.Status.PodIP
			}
			out.Status.PodIPs[i] = ip
		}
	}
	out.Status.Conditions = trimConditions(pod.Status.Conditions)
	return out, nil
}

// trimConditions keeps the conditions spawnkit reads: PodReady (whether
// and since when a server is ready) and PodScheduled (why it cannot be
// scheduled).
func trimConditions(cs []corev1.PodCondition) []corev1.PodCondition {
	n := 0
	for _, c := range cs {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]corev1.PodCondition, 0, n)
	for _, c := range cs {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
			out = append(out, corev1.PodCondition{
				Type:               corev1.PodConditionType(intern(string(c.Type))),
				Status:             corev1.ConditionStatus(intern(string(c.Status))),
				Reason:             intern(c.Reason),
				Message:            c.Message,
				LastTransitionTime: c.LastTransitionTime,
			})
		}
	}
	return out
}

func trimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: intern(c.Name), Ports: trimPorts(c.Ports)}
	}
	return out
}

func trimPorts(ps []corev1.ContainerPort) []corev1.ContainerPort {
	if len(ps) == 0 {
		return nil
	}
	out := make([]corev1.ContainerPort, len(ps))
	for i, p := range ps {
		p.Name, p.Protocol, p.HostIP = intern(p.Name), corev1.Protocol(intern(string(p.Protocol))), intern(p.HostIP)
		out[i] = p
	}
	return out
}

func trimStatuses(cs []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(cs))
	for i, c := range cs {
		st := c.State
		if w := st.Waiting; w != nil {
			st.Waiting = &corev1.ContainerStateWaiting{Reason: intern(w.Reason), Message: w.Message}
		}
		if t := st.Terminated; t != nil {
			t2 := *t
			t2.Reason, t2.ContainerID = intern(t.Reason), ""
			st.Terminated = &t2
		}
		out[i] = corev1.ContainerStatus{Name: intern(c.Name), State: st, Ready: c.Ready, RestartCount: c.RestartCount}
	}
	return out
}

// intern returns the canonical copy of s, so that the many pods that
// carry the same string share one.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// internMap returns a copy of m with interned keys, and values interned
// when short (long values, such as a state annotation, are seldom
// shared).
func internMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if len(v) <= 64 {
			v = intern(v)
		}
		out[intern(k)] = v
	}
	return out
}

// OnChange calls fn for every pod the informer adds, updates or deletes
// (deleted true), starting with an add for every pod already cached. fn
// runs in the informer's goroutine, so it must be fast (enqueue work) and
// must not change the pod, which is the cache's own. The returned
// function removes the handler; the handler also ends with the handle's
// Release.
func (p *Pods) OnChange(fn func(pod *corev1.Pod, deleted bool)) (remove func(), err error) {
	if p.h.released.Load() {
		return nil, ErrReleased
	}
	select {
	case <-p.h.e.done:
		return nil, ErrReleased
	default:
	}
	call := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			fn(pod, deleted)
		}
	}
	reg, err := p.h.e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(obj, false) },
		UpdateFunc: func(_, obj any) { call(obj, false) },
		DeleteFunc: func(obj any) { call(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { _ = p.h.e.informer.RemoveEventHandler(reg) }) }, nil
}
