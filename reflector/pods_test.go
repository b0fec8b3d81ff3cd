package reflector

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestTransformPodKeepsReadAndScheduledConditions(t *testing.T) {
	cond := func(c corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, Reason: "r", Message: "m"}
	}
	tests := []struct {
		name string
		in   []corev1.PodCondition
		want []corev1.PodConditionType
	}{
		{"none", nil, nil},
		{"all five", []corev1.PodCondition{cond("PodReadyToStartContainers"), cond(corev1.PodInitialized),
			cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
			[]corev1.PodConditionType{corev1.PodReady, corev1.PodScheduled}},
		{"unread only", []corev1.PodCondition{cond(corev1.PodInitialized)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, err := TransformPod(&corev1.Pod{Status: corev1.PodStatus{Conditions: tt.in}})
			if err != nil {
				t.Fatal(err)
			}
			got := obj.(*corev1.Pod).Status.Conditions
			if len(got) != len(tt.want) {
				t.Fatalf("conditions = %+v, want types %v", got, tt.want)
			}
			for i, c := range got {
				if c.Type != tt.want[i] || c.Status != corev1.ConditionTrue || c.Reason != "r" || c.Message != "m" {
					t.Errorf("condition %d = %+v, want type %s with status, reason and message", i, c, tt.want[i])
				}
			}
		})
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
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ahead", UID: types.UID("uid-ahead")}}
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
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "1"}}
	a2 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "1", ResourceVersion: "2"}}
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

func TestTransformPodDropsInitContainerSpecs(t *testing.T) {
	obj, err := TransformPod(&corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
		Containers: []corev1.Container{{Name: "notebook", Image: "jupyter",
			Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888, Protocol: corev1.ProtocolTCP}}}},
	}, Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: "init"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.InitContainers != nil || len(pod.Status.InitContainerStatuses) != 1 {
		t.Errorf("init containers = %+v, statuses %+v; want no specs, the status kept", pod.Spec.InitContainers, pod.Status.InitContainerStatuses)
	}
	c := pod.Spec.Containers
	if len(c) != 1 || c[0].Name != "notebook" || c[0].Image != "" || len(c[0].Ports) != 1 ||
		c[0].Ports[0] != (corev1.ContainerPort{Name: "notebook-port", ContainerPort: 8888, Protocol: corev1.ProtocolTCP}) {
		t.Errorf("containers = %+v; want the notebook's name and port only", c)
	}
}
