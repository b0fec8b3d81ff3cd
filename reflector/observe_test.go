package reflector

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// seen is what an Observe function was called with.
type seen struct {
	name    string
	uid     types.UID
	rv      string
	deleted bool
}

// recorder collects an Observe function's calls.
type recorder struct {
	mu    sync.Mutex
	calls []seen
}

func (r *recorder) fn(pod *Pod, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, seen{pod.Name, pod.UID, pod.ResourceVersion, deleted})
}

func (r *recorder) snapshot() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.calls...)
}

// waitCalls waits until r has been called for pod name with deleted as
// given, and returns every call so far.
func (r *recorder) waitCalls(t *testing.T, name string, deleted bool) []seen {
	t.Helper()
	var calls []seen
	testutil.Eventually(t, 20*time.Second, fmt.Sprintf("a call for pod %s (deleted %v)", name, deleted), testutil.True(func() bool {
		calls = r.snapshot()
		return slices.ContainsFunc(calls, func(c seen) bool { return c.name == name && c.deleted == deleted })
	}))
	return calls
}

// Observe sees a pod's add, updates and deletion in order, and nothing
// of the pods cached before it (no replay).
func TestObserveSeesChangesInOrderWithoutReplay(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	createPod(t, ns, "before", nil)
	r := newRegistry(t, Options{})
	defer r.Close()
	pods := syncedPods(t, r, ns)
	var rec recorder
	remove, err := pods.Observe(rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer remove()

	created := createPod(t, ns, "observed", nil)
	for i := range 3 {
		p, err := c.Client.CoreV1().Pods(ns).Get(t.Context(), "observed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["step"] = strconv.Itoa(i)
		if _, err := c.Client.CoreV1().Pods(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Client.CoreV1().Pods(ns).Delete(t.Context(), "observed", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	calls := rec.waitCalls(t, "observed", true)
	var mine []seen
	for _, c := range calls {
		if c.name == "before" {
			t.Errorf("a pod cached before Observe was replayed: %+v", c)
		}
		if c.uid == created.UID {
			mine = append(mine, c)
		}
	}
	// The add, three label updates, perhaps a deletion timestamp, the
	// deletion: in resourceVersion order, the deletion last.
	if len(mine) < 5 || !mine[len(mine)-1].deleted {
		t.Fatalf("calls for the pod: %+v; want its add, 3 updates and its deletion last", mine)
	}
	for i := 1; i < len(mine); i++ {
		prev, _ := strconv.ParseUint(mine[i-1].rv, 10, 64)
		cur, _ := strconv.ParseUint(mine[i].rv, 10, 64)
		if cur < prev || mine[i-1].deleted {
			t.Errorf("call %d out of order: %+v after %+v", i, mine[i], mine[i-1])
		}
	}
}

// Once remove returns, the function is not called again, and remove
// waits for a call in progress; Release removes what the handle added,
// while another holder keeps the informer running.
func TestObserveRemoveAndRelease(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	defer r.Close()
	keep, err := r.Pods(t.Context(), ns) // holds the informer throughout
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Release()
	var control recorder
	removeControl, err := keep.Observe(control.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer removeControl()

	// A call in progress holds remove up.
	pods, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var after sync.Mutex // guards removed and calledAfter
	removed, calledAfter := false, false
	remove, err := pods.Observe(func(*Pod, bool) {
		once.Do(func() { close(entered); <-unblock })
		after.Lock()
		calledAfter = calledAfter || removed
		after.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, "first", nil)
	<-entered
	returned := make(chan struct{})
	go func() {
		remove()
		after.Lock()
		removed = true
		after.Unlock()
		close(returned)
	}()
	select {
	case <-returned:
		t.Fatal("remove returned while the function was running")
	case <-time.After(200 * time.Millisecond):
	}
	close(unblock)
	<-returned
	createPod(t, ns, "second", nil)
	control.waitCalls(t, "second", false)
	after.Lock()
	if calledAfter {
		t.Error("the function was called after remove returned")
	}
	after.Unlock()

	// Release removes the handle's functions, Observe's and OnChange's;
	// the informer runs on.
	var released, onChange, controlOnChange recorder
	if _, err := pods.Observe(released.fn); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.OnChange(onChange.fn); err != nil {
		t.Fatal(err)
	}
	removeControlOnChange, err := keep.OnChange(controlOnChange.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer removeControlOnChange()
	createPod(t, ns, "third", nil)
	released.waitCalls(t, "third", false)
	onChange.waitCalls(t, "third", false)
	pods.Release()
	createPod(t, ns, "fourth", nil)
	createPod(t, ns, "fifth", nil)
	// Observe functions are called one after another by one handler, so
	// once control has seen "fifth" every Observe call for "fourth" has
	// returned. The informer hands "fourth" to every client-go listener
	// before "fifth" to any, so once controlOnChange has seen "fifth" a
	// listener that Release failed to remove holds "fourth" too.
	control.waitCalls(t, "fifth", false)
	controlOnChange.waitCalls(t, "fifth", false)
	// Each client-go listener calls its handler from a goroutine of its
	// own, and no other listener's progress shows that goroutine's: only
	// a window can show that it is not called. It need cover that one
	// goroutine hand-off, not an informer's delivery.
	time.Sleep(100 * time.Millisecond)
	for what, rec := range map[string]*recorder{"Observe": &released, "OnChange": &onChange} {
		for _, c := range rec.snapshot() {
			if c.name == "fourth" || c.name == "fifth" {
				t.Errorf("after Release the %s function was called: %+v", what, c)
			}
		}
	}
	if _, err := pods.Observe(released.fn); err != ErrReleased {
		t.Errorf("Observe after Release = %v, want ErrReleased", err)
	}
}
