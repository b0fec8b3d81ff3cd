package reflector

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// podUIDs maps each cached pod's uid to the pod, for GetByUID. The pod
// informer's handler builds it; it is not an informer index because an
// index gives every pod a set of its own (about 230 B a pod), where this
// map costs one slot. The handler runs after the store has changed, so
// the map can lag the store by an event: GetByUID confirms against the
// store and, on a miss, scans it, so the lag never hides a cached pod.
type podUIDs struct {
	mu    sync.RWMutex // guards byUID
	byUID map[types.UID]*Pod
}

func newPodUIDs() *podUIDs { return &podUIDs{byUID: map[types.UID]*Pod{}} }

// observe records pod, added or updated, or forgets it when deleted.
func (u *podUIDs) observe(pod *Pod, deleted bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if deleted {
		delete(u.byUID, pod.UID)
		return
	}
	u.byUID[pod.UID] = pod
}

// get returns the pod last seen with uid, or nil.
func (u *podUIDs) get(uid types.UID) *Pod {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.byUID[uid]
}
