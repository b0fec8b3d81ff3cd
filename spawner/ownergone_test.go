package spawner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// A Secret of another server whose owning pod is gone is garbage the
// collector has not reached yet: a start that needs its name replaces
// it. While its pod still exists it is that server's, and the start is a
// collision. (The collector's lag cannot be produced on demand, so a fake
// clientset holds the objects.)
func TestOwnedObjectOfAGonePodIsReplaced(t *testing.T) {
	const ns = "hub"
	alice := naming.Server{Username: "alice"}
	bob := naming.Server{Username: "jupyter-alice"}
	for _, tc := range []struct {
		name       string
		owner      string    // the pod the stale Secret names as owner
		ownerUID   types.UID // and its UID
		ownerLives bool      // a pod of that name and UID exists
		collision  bool
	}{
		{"owner pod gone (its name now another pod's)", "jupyter-alice", "alice-old-pod", false, false},
		{"owner pod gone", "alice-elsewhere", "alice-old-pod", false, false},
		{"owner pod still there", "alice-elsewhere", "alice-live", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, client := clusterFactory(t, "", mustLoad(t, "namespace: "+ns+"\n"))
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jupyter-alice", Namespace: ns, UID: "bob-pod"}}
			stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: EnvSecretName(pod.Name), Namespace: ns, UID: "stale",
				Annotations:     ownerAnnotations(alice, nil),
				OwnerReferences: []metav1.OwnerReference{manifest.OwnerReference(tc.owner, tc.ownerUID)}}}
			if _, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.ownerLives {
				owner := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.owner, Namespace: ns, UID: tc.ownerUID}}
				if _, err := client.CoreV1().Pods(ns).Create(t.Context(), owner, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := client.CoreV1().Secrets(ns).Create(t.Context(), stale, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			sp, err := f.New(bob)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: stale.Name, Namespace: ns, Annotations: ownerAnnotations(bob, nil)}}
			err = sp.ensureOwned(t.Context(), pod, want)
			got, gerr := client.CoreV1().Secrets(ns).Get(t.Context(), stale.Name, metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if tc.collision {
				if !IsCollision(err) || got.Annotations[naming.AnnotationUsername] != "alice" {
					t.Errorf("ensureOwned = %v, Secret owned by %q; want a collision and alice's Secret untouched", err, got.Annotations[naming.AnnotationUsername])
				}
				return
			}
			if err != nil {
				t.Fatalf("ensureOwned = %v, want the stale Secret replaced", err)
			}
			if got.Annotations[naming.AnnotationUsername] != bob.Username || len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != pod.UID {
				t.Errorf("the Secret is %v owned by %v; want bob's, owned by his pod", got.Annotations, got.OwnerReferences)
			}
		})
	}
}
