package spawner

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// selfRecorded is a pod in ns under name claiming user, whose state
// record names itself (what recordsItself accepts).
func selfRecorded(ns, name, user string) *reflector.Pod {
	rec := State{PodName: name, Namespace: ns, StartID: "s1"}
	return reflector.NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
		naming.AnnotationUsername: user, naming.AnnotationServername: "", StateAnnotation: rec.String(), StartIDAnnotation: "s1"}}})
}

// TestAttack42OtherUsersNamespaceNeverTrusted: with user namespaces and
// no retired entry, a pod in user B's own namespace claiming user A,
// under A's own pod name or a self-recorded one, is not A's; nor does a
// hub State naming B's namespace make it A's (TrustsNamespace).
func TestAttack42OtherUsersNamespaceNeverTrusted(t *testing.T) {
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	cfg.EnableUserNamespaces = true
	f, err := NewFactory(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	a, b := naming.Server{Username: "alice42"}, naming.Server{Username: "bob42"}
	na, _ := f.namer.Names(a)
	nb, _ := f.namer.Names(b)
	for _, pod := range []*reflector.Pod{selfRecorded(nb.Namespace, na.Pod, a.Username), selfRecorded(nb.Namespace, "x", a.Username)} {
		var pe *PlacementError
		if err := f.CheckPlacement(a, pod, nil); !errors.As(err, &pe) {
			t.Errorf("pod %s/%s claiming alice in bob's namespace: %v, want a PlacementError", pod.Namespace, pod.Name, err)
		}
		if err := f.CheckPlacement(a, pod, &State{PodName: pod.Name, Namespace: pod.Namespace}); err == nil {
			t.Errorf("pod %s/%s claiming alice in bob's namespace trusted with a hub State naming it", pod.Namespace, pod.Name)
		}
	}
	if f.TrustsNamespace(a, nb.Namespace) {
		t.Errorf("bob's namespace %s trusted for alice", nb.Namespace)
	}
}
