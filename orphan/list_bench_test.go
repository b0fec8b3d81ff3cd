package orphan

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// benchRegistry is a Registry holding a synced informer over n spawnkit
// pods in ns, one per user ("user000000"…), served by client-go's fake
// clientset (testcluster.FakeClientset): the benchmarks measure List, not
// an API server. With varied, one pod in 997 is being deleted, unlabelled
// or unattributed.
func benchRegistry(b testing.TB, n int, ns string, varied bool) (*reflector.Registry, kubernetes.Interface) {
	objs := make([]kruntime.Object, n)
	for i := range objs {
		user := fmt.Sprintf("user%06d", i)
		objs[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: "jupyter-" + user, Namespace: ns, UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(1000 + i), CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)),
			Labels:      map[string]string{naming.LabelComponent: "singleuser-server", naming.LabelManagedBy: naming.ManagedBySpawnkit},
			Annotations: map[string]string{naming.AnnotationUsername: user, naming.AnnotationServername: ""},
		}}
		if !varied {
			continue
		}
		switch pod := objs[i].(*corev1.Pod); i % 997 {
		case 1: // being deleted: never an orphan
			pod.DeletionTimestamp = ptr.To(metav1.Now())
			pod.Finalizers = []string{"example.com/keep"}
		case 2: // not spawnkit's: never looked at
			delete(pod.Labels, naming.LabelManagedBy)
		case 3: // spawnkit's, but whose?
			pod.Annotations = nil
		}
	}
	client := testcluster.FakeClientset(objs...)
	r, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	pods, err := r.Pods(b.Context(), ns)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pods.Release)
	if err := pods.WaitForSync(b.Context()); err != nil {
		b.Fatal(err)
	}
	return r, client
}

// BenchmarkListFromRegistry is List end to end over 100,000 pods held in
// a Registry's synced informer: reading the cache, selecting, attributing,
// judging, sorting and building the orphans; once with 1% of the servers
// stopped and once with all of them.
func BenchmarkListFromRegistry(b *testing.B) {
	const n, ns = 100_000, "jhub"
	r, client := benchRegistry(b, n, ns, false)
	for _, tc := range []struct {
		name    string
		running func(int) bool
		want    int
	}{
		{"1pct", func(i int) bool { return i%100 != 0 }, n / 100},
		{"all", func(int) bool { return false }, n},
	} {
		b.Run(tc.name, func(b *testing.B) {
			known := benchKnown(n, tc.running)
			// Each call starts after a GC, as a sweeper's would (one call a
			// minute); the fastest is reported beside the mean, being what
			// the code costs without whatever else the machine runs.
			b.ReportAllocs()
			best := time.Duration(math.MaxInt64)
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
				begin := time.Now()
				got, err := List(b.Context(), known, Options{Client: client, Registry: r, Namespaces: []string{ns}, Kinds: []Kind{KindPod}})
				best = min(best, time.Since(begin))
				if err != nil || len(got) != tc.want {
					b.Fatal(len(got), err)
				}
			}
			b.ReportMetric(float64(best)/1e6, "best-ms")
		})
	}
}

// List judges a large cache in parts on several cores; what it finds, and
// the order, are exactly what it finds by LIST.
func TestListFromALargeCacheMatchesTheList(t *testing.T) {
	const ns = "jhub"
	n := 3*minPerPart + 17
	r, client := benchRegistry(t, n, ns, true)
	// Three in four servers stopped: enough orphans to be sorted in parts
	// and merged too.
	known := benchKnown(n, func(i int) bool { return i%4 == 0 })
	for i := range n / 50 { // servers the hub forgot
		delete(known.servers, ServerKey{User: fmt.Sprintf("user%06d", 50*i+7)})
	}
	for _, kinds := range [][]Kind{{KindPod}, AllKinds} {
		cached, err := List(t.Context(), known, Options{Client: client, Registry: r, Namespaces: []string{ns}, Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		listed, err := List(t.Context(), known, Options{Client: client, Namespaces: []string{ns}, Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		if len(cached) < 2*minPerPart || !slices.Equal(cached, listed) {
			t.Fatalf("kinds %v: %d orphans from the cache, %d by LIST; they differ or are too few", kinds, len(cached), len(listed))
		}
		reasons := map[Reason]int{}
		for _, o := range cached {
			reasons[o.Reason]++
		}
		if reasons[ReasonServerNotRunning] == 0 || reasons[ReasonServerUnknown] == 0 || reasons[ReasonUnattributed] == 0 {
			t.Errorf("kinds %v: reasons %v; want each of not running, unknown and unattributed", kinds, reasons)
		}
		if !slices.IsSortedFunc(cached, func(a, b Orphan) int { return strings.Compare(a.Name, b.Name) }) {
			t.Errorf("kinds %v: the orphans are not sorted by name", kinds)
		}
	}
}
