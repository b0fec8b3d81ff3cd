package orphan

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// benchInventory is n spawnkit pods in one namespace, one per user, as
// List would have found them.
func benchInventory(n int) *inventory {
	in := &inventory{objects: make([]object, 0, n)}
	for i := range n {
		user := fmt.Sprintf("user%06d", i)
		in.objects = append(in.objects, object{
			kind:       KindPod,
			meta:       objectMeta{Name: "jupyter-" + user, Namespace: "jhub", UID: types.UID(fmt.Sprint(i))},
			attributed: true, key: ServerKey{User: user},
		})
	}
	return in
}

// BenchmarkDiffAllOrphans is the worst case of the diff: the hub knows
// 100,000 servers, none of them running, so every pod is an orphan to be
// built and sorted.
func BenchmarkDiffAllOrphans(b *testing.B) {
	const n = 100_000
	known := NewKnown(n)
	for i := range n {
		known.Add(fmt.Sprintf("user%06d", i), "", false)
	}
	in := benchInventory(n)
	b.ReportAllocs()
	for b.Loop() {
		if got := diff(known, in, AllKinds); len(got) != n {
			b.Fatal(len(got))
		}
	}
}

// BenchmarkDiffPodsAndSecrets adds to BenchmarkDiff's pods a secret per
// pod, owned by it, so that the pod indexes are built and used.
func BenchmarkDiffPodsAndSecrets(b *testing.B) {
	const n = 100_000
	known := NewKnown(n)
	for i := range n {
		known.Add(fmt.Sprintf("user%06d", i), "", i%100 != 0)
	}
	in := benchInventory(n)
	for i := range n {
		pod := in.objects[i]
		in.objects = append(in.objects, object{
			kind: KindSecret, meta: objectMeta{Name: pod.meta.Name, Namespace: pod.meta.Namespace},
			ownerPods: []types.UID{pod.meta.UID}, attributed: true, key: pod.key,
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := diff(known, in, AllKinds); len(got) != n/100 {
			b.Fatal(len(got))
		}
	}
}
