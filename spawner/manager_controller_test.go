package spawner

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// podChanged lets pass the pod versions of a start in flight (recording
// them for runStart) and, once the start has ended, the version it found
// ready; any other version, and a deletion, is reconciled.
func TestPodChangedSkipsTheReadyVersion(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[serverKey]())
	defer q.ShutDown()
	key := serverKey{user: "alice"}
	e := &entry{key: key, status: ServerStatus{Phase: PhaseStarting}}
	m := &Manager{servers: map[serverKey]*entry{key: e}, queue: q}
	podOf := func(rv string) *reflector.Pod {
		return reflector.NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jupyter-alice", ResourceVersion: rv,
			Labels:      map[string]string{naming.LabelManagedBy: naming.ManagedBySpawnkit},
			Annotations: map[string]string{naming.AnnotationUsername: "alice"}}})
	}
	queued := func() int {
		n := q.Len()
		for range n {
			k, _ := q.Get()
			q.Done(k)
			q.Forget(k)
		}
		return n
	}
	e.op = &operation{kind: "start"}
	for _, rv := range []string{"1", "2", "3"} {
		m.podChanged(podOf(rv), false)
	}
	if n := queued(); n != 0 || !slices.Equal(e.skipped, []string{"1", "2", "3"}) {
		t.Fatalf("during the start: %d queued, skipped %v; want none queued and 1, 2, 3 recorded", n, e.skipped)
	}
	e.op, e.readyVersion, e.status.Phase = nil, "4", PhaseRunning
	m.podChanged(podOf("4"), false)
	if n := queued(); n != 0 {
		t.Errorf("the ready version after the start: %d queued, want none", n)
	}
	m.podChanged(podOf("4"), true)
	if n := queued(); n != 1 {
		t.Errorf("a deletion carrying the ready version: %d queued, want 1", n)
	}
	m.podChanged(podOf("5"), false)
	if n := queued(); n != 1 {
		t.Errorf("a later version: %d queued, want 1", n)
	}
	e.status.Phase = PhaseFailed
	m.podChanged(podOf("4"), false)
	if n := queued(); n != 1 {
		t.Errorf("the ready version of a server no longer running: %d queued, want 1", n)
	}
}
