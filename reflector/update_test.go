package reflector

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// An update of a cached pod is cached exactly as a fresh pod would be
// (NewPod), and shares the earlier version's name, uid, labels and
// annotations only while all of them are unchanged.
func TestNewPodFromTheCachedVersion(t *testing.T) {
	sameSlice := func(a, b Pairs) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		shared bool
	}{
		{"status only", func(p *corev1.Pod) {
			p.ResourceVersion = "43"
			p.Status.Phase = corev1.PodSucceeded
			p.Status.Message = "new"
		}, true},
		{"a dropped annotation", func(p *corev1.Pod) { p.Annotations["example.com/other"] = "y" }, true},
		{"a label value", func(p *corev1.Pod) { p.Labels["component"] = "other" }, false},
		{"a label added", func(p *corev1.Pod) { p.Labels["extra"] = "x" }, false},
		{"a label removed", func(p *corev1.Pod) { delete(p.Labels, "component") }, false},
		{"a label renamed, same count", func(p *corev1.Pod) { delete(p.Labels, "component"); p.Labels["komponent"] = "singleuser-server" }, false},
		{"a kept annotation value", func(p *corev1.Pod) { p.Annotations["spawnkit.dev/start-id"] = "0000000000000000" }, false},
		{"a kept annotation removed", func(p *corev1.Pod) { delete(p.Annotations, "spawnkit.dev/start-id") }, false},
		{"another pod of the name", func(p *corev1.Pod) { p.UID = "uid-2" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := NewPod(fullPod())
			next := fullPod()
			tc.change(next)
			got, want := newPod(next, prev), NewPod(next)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("made from the cached version:\n%+v\nwant as NewPod makes it:\n%+v", got, want)
			}
			shares := sameSlice(got.Labels, prev.Labels) || sameSlice(got.Annotations, prev.Annotations) ||
				unsafe.StringData(got.Name) == unsafe.StringData(prev.Name)
			if shares != tc.shared {
				t.Errorf("shares the cached version's metadata: %v, want %v", shares, tc.shared)
			}
			if tc.shared && !(sameSlice(got.Labels, prev.Labels) && sameSlice(got.Annotations, prev.Annotations)) {
				t.Error("shares only part of the cached version's metadata")
			}
		})
	}
	// A pod without labels or annotations has nothing to share and
	// still comes out as NewPod makes it.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID("u"), ResourceVersion: "1"}}
	if got := newPod(bare, NewPod(bare)); !reflect.DeepEqual(got, NewPod(bare)) {
		t.Errorf("bare pod: %+v", got)
	}
}

// Against the API server: status updates keep the cached labels'
// memory, and a label or annotation change reaches the cache at once.
func TestCachedUpdatesFollowMetadataChanges(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	ctx := t.Context()
	pods, err := r.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	versions := make(chan *Pod, 100)
	remove, err := pods.OnChange(func(p *Pod, deleted bool) {
		if !deleted && p.Name == "jupyter-upd" {
			versions <- p
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	next := func(what string, ok func(*Pod) bool) *Pod {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case p := <-versions:
				if ok(p) {
					return p
				}
			case <-timeout:
				t.Fatalf("the cache never held %s", what)
			}
		}
	}
	api := cluster.Client.CoreV1().Pods(ns)
	if _, err := api.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "jupyter-upd", Labels: map[string]string{"component": "singleuser-server", "hub.jupyter.org/username": "upd"},
			Annotations: map[string]string{"hub.jupyter.org/username": "upd", "spawnkit.dev/start-id": "1111"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "jupyter"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := next("the new pod", func(*Pod) bool { return true })
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := api.Get(ctx, "jupyter-upd", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase, p.Status.Message = corev1.PodRunning, "running now"
		_, err = api.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	second := next("the status update", func(p *Pod) bool { return p.Phase == corev1.PodRunning })
	if second.Message != "running now" {
		t.Errorf("the status update is cached with message %q", second.Message)
	}
	if &second.Labels[0] != &first.Labels[0] || &second.Annotations[0] != &first.Annotations[0] {
		t.Error("a status update rebuilt the unchanged labels and annotations")
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := api.Get(ctx, "jupyter-upd", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Labels["example.com/team"] = "blue"
		p.Annotations["spawnkit.dev/start-id"] = "2222"
		_, err = api.Update(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	third := next("the label change", func(p *Pod) bool { return p.Labels.Get("example.com/team") == "blue" })
	if third.Annotations.Get("spawnkit.dev/start-id") != "2222" || third.Phase != corev1.PodRunning {
		t.Errorf("after a label and annotation change the cache holds labels %v, annotations %v, phase %s",
			third.Labels, third.Annotations, third.Phase)
	}
	if first.Labels.Get("component") != "singleuser-server" || second.Annotations.Get("spawnkit.dev/start-id") != "1111" {
		t.Error("an earlier cached version changed")
	}
}

// The Registry's pod transform reads the pod's cached version from the
// store (by namespace/name), passes its own output and anything else
// through, and makes what NewPod makes.
func TestUpdateTransform(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	transform := updateTransform(store)
	v1 := fullPod()
	out, err := transform(v1)
	if err != nil {
		t.Fatal(err)
	}
	first, ok := out.(*Pod)
	if !ok || !reflect.DeepEqual(first, NewPod(v1)) {
		t.Fatalf("a new pod became %#v, want NewPod's", out)
	}
	if again, _ := transform(first); again != first {
		t.Error("a cached pod handed back to the transform was not passed through")
	}
	other := cache.DeletedFinalStateUnknown{Key: "jhub/jupyter-alice", Obj: first}
	if got, _ := transform(other); !reflect.DeepEqual(got, other) {
		t.Errorf("a tombstone became %#v", got)
	}
	if err := store.Add(first); err != nil {
		t.Fatal(err)
	}
	v2 := fullPod()
	v2.ResourceVersion, v2.Status.Message = "43", "updated"
	out, _ = transform(v2)
	second := out.(*Pod)
	if !reflect.DeepEqual(second, NewPod(v2)) || &second.Labels[0] != &first.Labels[0] {
		t.Error("an update of a cached pod is not NewPod's result sharing the cached labels")
	}
	// Another namespace's pod of the same name has nothing to share.
	elsewhere := fullPod()
	elsewhere.Namespace, elsewhere.UID = "other", "uid-other"
	out, _ = transform(elsewhere)
	if p := out.(*Pod); &p.Labels[0] == &first.Labels[0] || !reflect.DeepEqual(p, NewPod(elsewhere)) {
		t.Error("a pod of another namespace shared the cached pod's labels")
	}
}
