package reflector

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unique"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/naming"
)

// fullPod is a pod with every field the cache contract keeps set, and
// much that it drops.
func fullPod() *corev1.Pod {
	t := func(s int) metav1.Time { return metav1.NewTime(time.Unix(1_700_000_000+int64(s), 0)) }
	cond := func(c corev1.PodConditionType, s corev1.ConditionStatus, at int) corev1.PodCondition {
		return corev1.PodCondition{Type: c, Status: s, Reason: string(c) + "Reason", Message: string(c) + " message",
			LastTransitionTime: t(at), LastProbeTime: t(at + 1)}
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "jhub", Name: "jupyter-alice", GenerateName: "jupyter-", UID: "uid-1", ResourceVersion: "42",
			Generation: 3, CreationTimestamp: t(0), DeletionTimestamp: ptr.To(t(100)), DeletionGracePeriodSeconds: ptr.To[int64](30),
			Labels: map[string]string{"component": "singleuser-server", "app.kubernetes.io/managed-by": "spawnkit",
				"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": ""},
			Annotations: map[string]string{"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": "",
				"spawnkit.dev/state": `{"pod_name":"jupyter-alice"}`, "spawnkit.dev/start-id": "3f9c2a71d0b84e6a",
				"kubectl.kubernetes.io/last-applied-configuration": "{}", "example.com/other": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n", UID: "node-uid"}},
			Finalizers:      []string{"example.com/f"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox",
				Ports: []corev1.ContainerPort{{Name: "init-port", ContainerPort: 1234}}}},
			Containers: []corev1.Container{
				{Name: "notebook", Image: "jupyter", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
					Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888, Protocol: corev1.ProtocolTCP}}},
				{Name: "sidecar", Ports: []corev1.ContainerPort{{ContainerPort: 9100}}},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, Reason: "SomeReason", Message: "some message", PodIP: "10.0.0.7",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.7"}}, HostIP: "10.96.0.1", QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{cond("PodReadyToStartContainers", corev1.ConditionTrue, 1),
				cond(corev1.PodInitialized, corev1.ConditionTrue, 2), cond(corev1.PodReady, corev1.ConditionTrue, 3),
				cond(corev1.ContainersReady, corev1.ConditionTrue, 4), cond(corev1.PodScheduled, corev1.ConditionFalse, 5)},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", ContainerID: "containerd://init", Image: "busybox",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Signal: 0, Reason: "Completed",
					Message: "done", StartedAt: t(6), FinishedAt: t(7), ContainerID: "containerd://init"}}}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "notebook", Ready: true, RestartCount: 2, Image: "jupyter", ImageID: "sha", ContainerID: "containerd://nb",
					State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t(8)}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}},
				{Name: "sidecar", RestartCount: 5,
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}},
			},
		},
	}
}

// Every field the cache contract (doc.go) lists is kept.
func TestNewPodKeepsTheContract(t *testing.T) {
	in := fullPod()
	at := func(s int) metav1.Time { return metav1.NewTime(time.Unix(1_700_000_000+int64(s), 0)) }
	pod := NewPod(in)
	tests := []struct {
		name      string
		got, want any
	}{
		{"namespace", pod.Namespace, "jhub"},
		{"name", pod.Name, "jupyter-alice"},
		{"uid", pod.UID, types.UID("uid-1")},
		{"resourceVersion", pod.ResourceVersion, "42"},
		{"creationTimestamp", pod.CreationTimestamp, at(0)},
		{"deletionTimestamp", *pod.DeletionTimestamp, at(100)},
		{"labels, all of them", pod.Labels.Map(), in.Labels},
		{"owner and spawnkit annotations", pod.Annotations.Map(), map[string]string{"hub.jupyter.org/username": "alice",
			"hub.jupyter.org/servername": "", "spawnkit.dev/state": `{"pod_name":"jupyter-alice"}`, "spawnkit.dev/start-id": "3f9c2a71d0b84e6a"}},
		{"nodeName", pod.NodeName, "node-1"},
		{"container ports", pod.Ports, []ContainerPort{{Container: "notebook", Name: "notebook-port", ContainerPort: 8888},
			{Container: "sidecar", ContainerPort: 9100}}},
		{"phase", pod.Phase, corev1.PodRunning},
		{"reason", pod.Reason, "SomeReason"},
		{"message", pod.Message, "some message"},
		{"podIP", pod.PodIP, "10.0.0.7"},
		{"hostIP", pod.HostIP, "10.96.0.1"},
		{"PodReady condition", pod.Ready, PodCondition{Status: corev1.ConditionTrue, Reason: "ReadyReason", Message: "Ready message", LastTransitionTime: at(3)}},
		{"PodScheduled condition", pod.Scheduled, PodCondition{Status: corev1.ConditionFalse, Reason: "PodScheduledReason",
			Message: "PodScheduled message", LastTransitionTime: at(5)}},
		{"init container status (terminated)", pod.InitContainerStatuses, []ContainerStatus{{Name: "init",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", Message: "done",
				StartedAt: at(6), FinishedAt: at(7)}}}}},
		{"container status (running)", pod.ContainerStatuses[0], ContainerStatus{Name: "notebook", Ready: true, RestartCount: 2,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(8)}}}},
		{"container status (waiting)", pod.ContainerStatuses[1], ContainerStatus{Name: "sidecar", RestartCount: 5,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %+v, want %+v", tt.got, tt.want)
			}
		})
	}
	t.Run("no scheduled condition", func(t *testing.T) {
		if got := NewPod(&corev1.Pod{}).Scheduled; got != (PodCondition{}) {
			t.Errorf("Scheduled of a pod without conditions = %+v, want zero", got)
		}
	})
	t.Run("shares nothing with its source", func(t *testing.T) {
		in.Labels["component"] = "changed"
		in.Status.ContainerStatuses[0].State.Running.StartedAt = at(99)
		in.DeletionTimestamp.Time = time.Time{}
		in.Spec.Containers[0].Ports[0].ContainerPort = 1
		if pod.Labels.Get("component") != "singleuser-server" || pod.ContainerStatuses[0].State.Running.StartedAt != at(8) ||
			*pod.DeletionTimestamp != at(100) || pod.Ports[0].ContainerPort != 8888 {
			t.Errorf("a change to the source pod showed in the cached one: %+v", pod)
		}
	})
}

// client-go reads cached pods through meta.Accessor: keys, the namespace
// index, resource versions and tombstones work on them.
func TestPodObjectMeta(t *testing.T) {
	pod := NewPod(fullPod())
	m, err := meta.Accessor(pod)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetNamespace() != "jhub" || m.GetName() != "jupyter-alice" || m.GetUID() != "uid-1" || m.GetResourceVersion() != "42" ||
		m.GetDeletionTimestamp() != pod.DeletionTimestamp || m.GetCreationTimestamp() != pod.CreationTimestamp {
		t.Errorf("accessor reads %s/%s %s rv %s; want the pod's", m.GetNamespace(), m.GetName(), m.GetUID(), m.GetResourceVersion())
	}
	if !reflect.DeepEqual(m.GetLabels(), pod.Labels.Map()) || m.GetAnnotations()["spawnkit.dev/start-id"] != "3f9c2a71d0b84e6a" {
		t.Errorf("labels %v, annotations %v", m.GetLabels(), m.GetAnnotations())
	}
	if m.GetOwnerReferences() != nil || m.GetFinalizers() != nil || m.GetManagedFields() != nil || m.GetGeneration() != 0 ||
		m.GetDeletionGracePeriodSeconds() != nil || m.GetGenerateName() != "" {
		t.Error("metadata the cache drops must read as empty")
	}
	if n := testing.AllocsPerRun(100, func() {
		m, _ := meta.Accessor(pod)
		_, _, _ = m.GetNamespace(), m.GetName(), m.GetResourceVersion()
	}); n != 0 {
		t.Errorf("reading a pod through meta.Accessor allocates %v times; want 0", n)
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err != nil || key != "jhub/jupyter-alice" {
		t.Errorf("key = %q, %v", key, err)
	}
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(cache.DeletedFinalStateUnknown{Key: "jhub/jupyter-alice", Obj: pod}); err != nil || key != "jhub/jupyter-alice" {
		t.Errorf("tombstone key = %q, %v", key, err)
	}
	if ns, err := cache.MetaNamespaceIndexFunc(pod); err != nil || !slices.Equal(ns, []string{"jhub"}) {
		t.Errorf("namespace index = %v, %v", ns, err)
	}
	m.SetResourceVersion("43")
	m.SetAnnotations(map[string]string{"spawnkit.dev/state": "{}", "example.com/dropped": "x"})
	m.SetLabels(map[string]string{"b": "2", "a": "1"})
	m.SetFinalizers([]string{"dropped"})
	if pod.ResourceVersion != "43" || !reflect.DeepEqual(pod.Annotations, Pairs{{"spawnkit.dev/state", "{}"}}) ||
		!reflect.DeepEqual(pod.Labels, Pairs{{"a", "1"}, {"b", "2"}}) || m.GetFinalizers() != nil {
		t.Errorf("after the setters: %+v", pod)
	}
	if !labels.SelectorFromSet(labels.Set{"a": "1"}).Matches(pod.Labels) {
		t.Error("a label selector does not match Pairs")
	}
}

// TransformPod is idempotent: client-go may hand it a pod it has already
// transformed.
func TestTransformPodIdempotent(t *testing.T) {
	first, err := TransformPod(fullPod())
	if err != nil {
		t.Fatal(err)
	}
	again, err := TransformPod(first)
	if err != nil || again != first {
		t.Errorf("TransformPod(*Pod) = %p, %v; want the same pod %p", again, err, first)
	}
	other := &corev1.Event{}
	if got, _ := TransformPod(other); got != other {
		t.Error("TransformPod changed an object that is not a pod")
	}
}

// The compact pods work in a real client-go informer: keys, the namespace
// index, updates, deletes, and the tombstone of a pod whose deletion a
// relist discovers. The API server cannot be made to lose a delete on
// demand, so a fake clientset serves the lists and watches.
func TestCompactPodsInAnInformer(t *testing.T) {
	pod := func(ns, name, uid, rv string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: rv,
			Labels: map[string]string{"component": "singleuser-server"}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	}
	var mu sync.Mutex // guards items
	items := []corev1.Pod{pod("ns1", "a", "uid-a", "1"), pod("ns1", "b", "uid-b", "2"), pod("ns2", "c", "uid-c", "3")}
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: slices.Clone(items)}, nil
	})
	watches := make(chan *watch.FakeWatcher, 10)
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(10, false)
		watches <- w
		return true, w, nil
	})
	r, err := New(Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pods, err := r.Pods(t.Context(), metav1.NamespaceAll)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	type change struct {
		key     string
		deleted bool
	}
	changes := make(chan change, 20)
	remove, err := pods.OnChange(func(p *Pod, deleted bool) { changes <- change{p.Namespace + "/" + p.Name, deleted} })
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	tombstones := make(chan any, 5)
	if _, err := pods.h.e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			tombstones <- d.Obj
		}
	}}); err != nil {
		t.Fatal(err)
	}
	waitFor := func(want change) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case c := <-changes:
				if c == want {
					return
				}
			case <-timeout:
				t.Fatalf("no change %+v", want)
			}
		}
	}
	names := func(ps []*Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	// The informer replays the pods it holds in its store's order, a map's,
	// so the three adds are awaited as a set.
	seen := map[string]bool{}
	for timeout := time.After(30 * time.Second); len(seen) < 3; {
		select {
		case c := <-changes:
			if !c.deleted {
				seen[c.key] = true
			}
		case <-timeout:
			t.Fatalf("adds seen %v; want ns1/a, ns1/b and ns2/c", seen)
		}
	}
	if !seen["ns1/a"] || !seen["ns1/b"] || !seen["ns2/c"] {
		t.Fatalf("adds seen %v; want ns1/a, ns1/b and ns2/c", seen)
	}
	if l, err := pods.List(t.Context(), "ns1"); err != nil || !slices.Equal(names(l), []string{"a", "b"}) {
		t.Errorf("List(ns1) = %v, %v; want a and b (the namespace index)", names(l), err)
	}
	if p, ok, err := pods.GetByUID(t.Context(), "uid-b"); err != nil || !ok || p.Name != "b" {
		t.Errorf("GetByUID(uid-b) = %v, %v, %v", p, ok, err)
	}
	w := <-watches
	// An update changes the cached pod in place of the old one.
	running := pod("ns1", "a", "uid-a", "11")
	running.Status.Phase = corev1.PodRunning
	w.Modify(&running)
	waitFor(change{"ns1/a", false})
	if p, ok, _ := pods.Get(t.Context(), "ns1", "a"); !ok || p.Phase != corev1.PodRunning || p.ResourceVersion != "11" {
		t.Errorf("after the update Get(a) = %+v, %v", p, ok)
	}
	// A watch delete.
	c := pod("ns2", "c", "uid-c", "12")
	w.Delete(&c)
	waitFor(change{"ns2/c", true})
	// b is deleted while the watch is down: the relist finds it gone and
	// the informer delivers its last cached state in a tombstone.
	mu.Lock()
	items = []corev1.Pod{running}
	mu.Unlock()
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	waitFor(change{"ns1/b", true})
	select {
	case obj := <-tombstones:
		if p, ok := obj.(*Pod); !ok || p.Name != "b" || p.UID != "uid-b" {
			t.Errorf("tombstone holds %#v, want the cached pod b", obj)
		}
	case <-time.After(5 * time.Second):
		t.Error("the relist's delete of b came without a tombstone")
	}
	if _, ok, _ := pods.Get(t.Context(), "ns1", "b"); ok {
		t.Error("b is still cached")
	}
	if _, ok, _ := pods.GetByUID(t.Context(), "uid-b"); ok {
		t.Error("b is still found by uid")
	}
	if l, _ := pods.List(t.Context(), metav1.NamespaceAll); !slices.Equal(names(l), []string{"a"}) {
		t.Errorf("List = %v, want a only", names(l))
	}
	if l, _ := pods.List(t.Context(), "ns2"); len(l) != 0 {
		t.Errorf("List(ns2) = %v, want none", names(l))
	}
}

// GetByUID must not miss a pod that the store has and the handler's uid
// map has not seen yet (the handler runs after the store changes).
func TestGetByUIDAheadOfTheHandler(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	defer r.Close()
	p, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	if err := p.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Straight into the store, as an informer puts it there before its
	// handler runs.
	pod := NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ahead", UID: types.UID("uid-ahead")}})
	if err := p.h.e.informer.GetIndexer().Add(pod); err != nil {
		t.Fatal(err)
	}
	got, ok, err := p.GetByUID(t.Context(), pod.UID)
	if err != nil || !ok || got != pod {
		t.Errorf("GetByUID before the handler = %v, %v, %v; want the stored pod", got, ok, err)
	}
	byKey, ok, err := p.GetByKey(t.Context(), PodKey(ns, "ahead"))
	if err != nil || !ok || byKey != pod {
		t.Errorf("GetByKey = %v, %v, %v; want the stored pod", byKey, ok, err)
	}
	if _, ok, err := p.GetByUID(t.Context(), "no-such-uid"); ok || err != nil {
		t.Errorf("GetByUID(unknown) = %v, %v; want false, nil", ok, err)
	}
}

// The uid map follows the handler's adds, updates and deletes.
func TestPodUIDsObserve(t *testing.T) {
	u := newPodUIDs()
	a := &Pod{Name: "a", UID: "1"}
	a2 := &Pod{Name: "a", UID: "1", ResourceVersion: "2"}
	u.observe(a, false)
	u.observe(a2, false)
	if got := u.get("1"); got != a2 {
		t.Errorf("after an update get = %v, want the newer pod", got)
	}
	u.observe(a2, true)
	if got := u.get("1"); got != nil {
		t.Errorf("after a delete get = %v, want nil", got)
	}
}

// Strings many pods share are interned; a pod's own cost no intern table
// entry: they are copied, all into one allocation, so the cached pod
// shares no memory with the decoded one.
func TestNewPodInterning(t *testing.T) {
	a, b := fullPod(), fullPod()
	// Distinct copies of every string, as two decoded pods have.
	b.Namespace, b.Name = strings.Clone(a.Namespace), strings.Clone(a.Name)
	b.Labels = map[string]string{}
	for k, v := range a.Labels {
		b.Labels[strings.Clone(k)] = strings.Clone(v)
	}
	b.Annotations = map[string]string{}
	for k, v := range a.Annotations {
		b.Annotations[strings.Clone(k)] = strings.Clone(v)
	}
	pa, pb := NewPod(a), NewPod(b)
	state := func(p *Pod) string { v, _ := p.Annotations.Lookup("spawnkit.dev/state"); return v }
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(pa.Namespace, pb.Namespace) || !same(pa.Labels[0].Key, pb.Labels[0].Key) || !same(pa.Labels[0].Value, pb.Labels[0].Value) ||
		!same(pa.Annotations[0].Key, pb.Annotations[0].Key) {
		t.Error("namespace, label keys and values, annotation keys: not interned")
	}
	if same(pa.Name, pb.Name) {
		t.Error("the pod's name was interned")
	}
	// The own strings lie in one slab, in the order ownStrings copies
	// them: name, uid, resourceVersion, ...
	inSlab := func(prev, next string) bool {
		return uintptr(unsafe.Pointer(unsafe.StringData(next))) == uintptr(unsafe.Pointer(unsafe.StringData(prev)))+uintptr(len(prev))
	}
	if !inSlab(pa.Name, string(pa.UID)) || !inSlab(string(pa.UID), pa.ResourceVersion) {
		t.Error("the pod's name, uid and resourceVersion are not in one slab")
	}
	for _, own := range []string{pa.Name, string(pa.UID), pa.ResourceVersion, pa.Message, pa.PodIP,
		pa.Annotations.Get("spawnkit.dev/state"), pa.Labels.Get(naming.LabelUsername)} {
		for _, src := range []string{a.Name, string(a.UID), a.ResourceVersion, a.Status.Message, a.Status.PodIP,
			a.Annotations["spawnkit.dev/state"], a.Labels[naming.LabelUsername]} {
			if own != "" && same(own, src) {
				t.Errorf("the cached pod shares %q with the decoded pod", own)
			}
		}
	}
	if pa.Name != a.Name || pa.UID != a.UID || pa.PodIP != a.Status.PodIP || state(pa) != a.Annotations["spawnkit.dev/state"] {
		t.Error("a copied string differs from the decoded pod's")
	}
	if u := pa.Labels.Get(naming.LabelUsername); u == "" || same(u, pb.Labels.Get(naming.LabelUsername)) {
		t.Errorf("the owner's user label value %q was interned (or is missing)", u)
	}
	if same(state(pa), state(pb)) {
		t.Error("the state annotation was interned")
	}
	// An annotation that repeats a label shares the label's string.
	if !same(pa.Annotations.Get("hub.jupyter.org/username"), pa.Labels.Get("hub.jupyter.org/username")) {
		t.Error("the user annotation does not share the user label's string")
	}
}

// TestInternCacheReturnsCanonicalStrings interns, from several goroutines
// at once, four times more distinct strings than the cache has slots (so
// slots collide and are overwritten), each many times: every answer must
// equal its input and be the one canonical copy unique.Make keeps.
func TestInternCacheReturnsCanonicalStrings(t *testing.T) {
	words := make([]string, 4*internSlots)
	for i := range words {
		words[i] = strings.Repeat("k", i%7) + "label-" + strconv.Itoa(i)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 5 {
				for i := range words {
					w := words[(i*(g+1)+round)%len(words)]
					// The handle keeps w's canonical copy while it is
					// compared. The argument is a fresh copy each time:
					// interning must not depend on its memory.
					canon := unique.Make(w)
					got := intern(strings.Clone(w))
					if got != w {
						t.Errorf("intern(%q) = %q", w, got)
						return
					}
					if unsafe.StringData(got) != unsafe.StringData(canon.Value()) {
						t.Errorf("intern(%q) is not the canonical copy", w)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if intern("") != "" {
		t.Error(`intern("") is not ""`)
	}
}
