package manager

import (
	"context"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/reflector"
)

// podSet is the Manager's hold on the pod informers of every namespace
// its servers can be in: the configured one and the profiles' (one
// informer each, so a Role per namespace is enough), or the one informer
// of all namespaces with enable_user_namespaces.
//
// Release may run while Health reads Status from another goroutine (a
// readiness probe during shutdown): handles is guarded by mu, and the
// other methods work on a snapshot of it, so a released set reads as
// empty and unsynced rather than racing.
type podSet struct {
	mu      sync.Mutex
	handles []*reflector.Pods
}

// snapshot is the informers held now (none once released).
func (s *podSet) snapshot() []*reflector.Pods {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handles
}

// watchedNamespaces are the namespaces the Manager's informers cover:
// every namespace the Factory's servers can be in (all of them with
// enable_user_namespaces).
func watchedNamespaces(namespaces []string, all bool) []string {
	if all {
		return []string{metav1.NamespaceAll}
	}
	return slices.Clone(namespaces)
}

// acquirePods takes the Registry's pod informer of each namespace.
func acquirePods(ctx context.Context, r *reflector.Registry, namespaces []string) (*podSet, error) {
	s := &podSet{}
	for _, ns := range namespaces {
		p, err := r.Pods(ctx, ns)
		if err != nil {
			s.Release()
			return nil, err
		}
		s.mu.Lock()
		s.handles = append(s.handles, p)
		s.mu.Unlock()
	}
	return s, nil
}

// Release releases every informer.
func (s *podSet) Release() {
	s.mu.Lock()
	handles := s.handles
	s.handles = nil
	s.mu.Unlock()
	for _, p := range handles {
		p.Release()
	}
}

// Observe calls fn for every pod change in any of the namespaces.
func (s *podSet) Observe(fn func(pod *reflector.Pod, deleted bool)) (remove func(), err error) {
	var removes []func()
	remove = func() {
		for _, r := range removes {
			r()
		}
	}
	for _, p := range s.snapshot() {
		r, err := p.Observe(fn)
		if err != nil {
			remove()
			return nil, err
		}
		removes = append(removes, r)
	}
	return remove, nil
}

// WaitForSync waits until every informer has synced.
func (s *podSet) WaitForSync(ctx context.Context) error {
	for _, p := range s.snapshot() {
		if err := p.WaitForSync(ctx); err != nil {
			return err
		}
	}
	return nil
}

// List returns every cached pod of every namespace.
func (s *podSet) List(ctx context.Context) ([]*reflector.Pod, error) {
	handles := s.snapshot()
	if len(handles) == 1 {
		return handles[0].List(ctx, metav1.NamespaceAll)
	}
	var out []*reflector.Pod
	for _, p := range handles {
		list, err := p.List(ctx, metav1.NamespaceAll)
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	return out, nil
}

// informerOf is the informer that holds namespace's pods, if any.
func (s *podSet) informerOf(namespace string) *reflector.Pods {
	for _, p := range s.snapshot() {
		if ns := p.Namespace(); ns == metav1.NamespaceAll || ns == namespace {
			return p
		}
	}
	return nil
}

// Get returns the cached pod namespace/name.
func (s *podSet) Get(ctx context.Context, namespace, name string) (*reflector.Pod, bool, error) {
	p := s.informerOf(namespace)
	if p == nil {
		return nil, false, nil
	}
	return p.Get(ctx, namespace, name)
}

// GetByKey returns the cached pod of a namespace/name key.
func (s *podSet) GetByKey(ctx context.Context, namespace, key string) (*reflector.Pod, bool, error) {
	p := s.informerOf(namespace)
	if p == nil {
		return nil, false, nil
	}
	return p.GetByKey(ctx, key)
}

// Status is the informers' condition as one: synced when all are, and,
// when one is unhealthy or denied, that one's errors (the first such).
func (s *podSet) Status() reflector.Status {
	var out reflector.Status
	objects, synced := 0, true
	picked := false
	for _, p := range s.snapshot() {
		st := p.Status()
		objects += st.Objects
		synced = synced && st.Synced
		if !picked || (!st.Healthy() || st.Denied != nil) && out.Healthy() && out.Denied == nil {
			out, picked = st, true
		}
	}
	out.Objects, out.Synced = objects, synced && picked
	return out
}
