package orphan

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/naming"
)

// benchObject is a listed object of a spawnkit server: user i's, in one
// namespace, owned by its pod when it is not one.
type benchObject struct {
	kind Kind
	meta metav1.ObjectMeta
}

// benchPods is n spawnkit pods in one namespace, one per user, as a LIST
// would have returned them.
func benchPods(n int) []benchObject {
	out := make([]benchObject, 0, n)
	for i := range n {
		user := fmt.Sprintf("user%06d", i)
		out = append(out, benchObject{KindPod, metav1.ObjectMeta{
			Name: "jupyter-" + user, Namespace: "jhub", UID: types.UID(fmt.Sprint(i)),
			Annotations: map[string]string{naming.AnnotationUsername: user, naming.AnnotationServername: ""},
		}})
	}
	return out
}

func benchKnown(n int, running func(i int) bool) *Known {
	known := NewKnown(n)
	for i := range n {
		known.Add(fmt.Sprintf("user%06d", i), "", running(i))
	}
	return known
}

// benchDiff measures the diff of listed objects: recording each, judging
// it and building the sorted orphans.
func benchDiff(b *testing.B, known *Known, objs []benchObject, want int) {
	b.ReportAllocs()
	for b.Loop() {
		in := newInventory(known, AllKinds)
		for _, o := range objs {
			in.add(o.kind, o.meta)
		}
		if got := in.orphans(); len(got) != want {
			b.Fatal(len(got))
		}
	}
}

// BenchmarkDiff: the hub knows 100,000 servers and 1% of them are
// stopped.
func BenchmarkDiff(b *testing.B) {
	const n = 100_000
	benchDiff(b, benchKnown(n, func(i int) bool { return i%100 != 0 }), benchPods(n), n/100)
}

// BenchmarkDiffAllOrphans is the worst case of the diff: the hub knows
// 100,000 servers, none of them running, so every pod is an orphan to be
// built and sorted.
func BenchmarkDiffAllOrphans(b *testing.B) {
	const n = 100_000
	benchDiff(b, benchKnown(n, func(int) bool { return false }), benchPods(n), n)
}

// BenchmarkDiffPodsAndSecrets adds to BenchmarkDiff's pods a secret per
// pod, owned by it, so that the pod indexes are built and used.
func BenchmarkDiffPodsAndSecrets(b *testing.B) {
	const n = 100_000
	objs := benchPods(n)
	for i := range n {
		pod := objs[i].meta
		secret := *pod.DeepCopy()
		secret.UID = types.UID("s" + string(pod.UID))
		secret.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
		objs = append(objs, benchObject{KindSecret, secret})
	}
	benchDiff(b, benchKnown(n, func(i int) bool { return i%100 != 0 }), objs, n/100)
}
