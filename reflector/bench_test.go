package reflector

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/manifest"
)

const (
	benchPods          = 10_000
	benchEventsPerPod  = 5
	benchTargetPodName = "jupyter-user-4242"
)

// realisticPod creates one spawnkit-built user pod on the API server and
// returns it as the server stores it (managedFields included), with a
// plausible running status.
func realisticPod(b *testing.B, ns string) *corev1.Pod {
	b.Helper()
	spec := manifest.PodSpec{
		Name: "template", Image: "quay.io/jupyter/scipy-notebook:2024-01-01", Port: 8888,
		Cmd: []string{"jupyterhub-singleuser"}, UID: ptr.To[int64](1000), FSGID: ptr.To[int64](100),
		Labels: map[string]string{"component": "singleuser-server", "hub.jupyter.org/username": "alice",
			"app": "jupyterhub", "heritage": "jupyterhub", "hub.jupyter.org/servername": "",
			"app.kubernetes.io/managed-by": "spawnkit"},
		Annotations: map[string]string{"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": "",
			"spawnkit.dev/start-id": "3f9c2a71d0b84e6a",
			"spawnkit.dev/state": `{"pod_name":"jupyter-alice","namespace":"jhub","dns_name":"jupyter-alice.jhub.svc.cluster.local",` +
				`"port":8888,"pvc_name":"claim-alice","version":1}`},
		CPULimit: resource.MustParse("2"), MemLimit: resource.MustParse("4Gi"), MemGuarantee: resource.MustParse("1Gi"),
		Volumes: []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-alice"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "home", MountPath: "/home/jovyan"}},
		Tolerations: []corev1.Toleration{{Key: "hub.jupyter.org/dedicated", Operator: corev1.TolerationOpEqual,
			Value: "user", Effect: corev1.TaintEffectNoSchedule}},
	}
	for _, name := range []string{"JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_ACTIVITY_URL", "JUPYTERHUB_BASE_URL",
		"JUPYTERHUB_CLIENT_ID", "JUPYTERHUB_HOST", "JUPYTERHUB_OAUTH_CALLBACK_URL", "JUPYTERHUB_OAUTH_SCOPES",
		"JUPYTERHUB_SERVER_NAME", "JUPYTERHUB_SERVICE_PREFIX", "JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_USER", "MEM_LIMIT", "CPU_LIMIT"} {
		spec.Env = append(spec.Env, corev1.EnvVar{Name: name, Value: "http://hub.jhub.svc.cluster.local:8081/hub/api/" + name})
	}
	pod, err := manifest.Pod(&spec)
	if err != nil {
		b.Fatal(err)
	}
	created, err := cluster.Client.CoreV1().Pods(ns).Create(b.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// The status a kubelet reports for a running server.
	now := metav1.Now()
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.244.1.17", PodIPs: []corev1.PodIP{{IP: "10.244.1.17"}},
		HostIP: "10.96.0.1", HostIPs: []corev1.HostIP{{IP: "10.96.0.1"}}, StartTime: &now, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{cond("PodReadyToStartContainers"), cond(corev1.PodInitialized),
			cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "notebook", Ready: true, Started: ptr.To(true),
			Image: spec.Image, ImageID: "quay.io/jupyter/scipy-notebook@sha256:5f1b4c4e0c1d2b7e9a3f6d8c2b1a0e9f8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a",
			ContainerID: "containerd://9d5c0f1e2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d",
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	updated, err := cluster.Client.CoreV1().Pods(ns).UpdateStatus(b.Context(), created, metav1.UpdateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return updated
}

func clonePod(tmpl *corev1.Pod, i int) *corev1.Pod {
	p := tmpl.DeepCopy()
	p.Name = fmt.Sprintf("jupyter-user-%d", i)
	p.UID = types.UID(fmt.Sprintf("uid-%d", i))
	return p
}

// syncedEntry starts an informer on an empty namespace (so it syncs) and
// returns it; benchmarks then fill its cache directly, since what they
// measure is the cost of a lookup or of a cached object, not how the
// objects arrived.
func syncedEntry(b *testing.B, r *Registry, res Resource) (*entry, func()) {
	ns, err := cluster.Client.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var e *entry
	var release func()
	switch res {
	case ResourcePods:
		p, err := r.Pods(b.Context(), ns.Name)
		if err != nil {
			b.Fatal(err)
		}
		e, release = p.h.e, p.Release
	case ResourceEvents:
		ev, err := r.Events(b.Context(), ns.Name)
		if err != nil {
			b.Fatal(err)
		}
		e, release = ev.h.e, ev.Release
	}
	if err := waitSynced(b.Context(), e); err != nil {
		b.Fatal(err)
	}
	return e, release
}

// BenchmarkPodLookup: one pod from a cache of 10,000, through Pods.Get
// and through the raw client-go indexer (the ratio is reported).
func BenchmarkPodLookup(b *testing.B) {
	testcluster.Require(b, cluster)
	r, err := New(Options{Config: cluster.Config})
	if err != nil {
		b.Fatal(err)
	}
	e, release := syncedEntry(b, r, ResourcePods)
	defer release()
	tmpl := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.key.Namespace}}
	for i := range benchPods {
		_ = e.informer.GetIndexer().Add(NewPod(clonePod(tmpl, i)))
	}
	pods := &Pods{h: handle{r: r, e: e}}
	ctx := b.Context()
	var ours time.Duration
	b.Run("spawnkit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := pods.Get(ctx, e.key.Namespace, benchTargetPodName); !ok || err != nil {
				b.Fatal("missing", err)
			}
		}
		ours = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("client-go", func(b *testing.B) {
		b.ReportAllocs()
		indexer := e.informer.GetIndexer()
		for b.Loop() {
			if _, ok, _ := indexer.GetByKey(e.key.Namespace + "/" + benchTargetPodName); !ok {
				b.Fatal("missing")
			}
		}
		raw := b.Elapsed() / time.Duration(b.N)
		b.ReportMetric(float64(ours)/float64(raw), "spawnkit/client-go")
	})
}

// BenchmarkPodEvents: one pod's events from a cache of 50,000 (10,000
// pods with 5 each), through the involved-object index and, as a raw
// client-go informer without that index must, by scanning the cache.
func BenchmarkPodEvents(b *testing.B) {
	testcluster.Require(b, cluster)
	r, err := New(Options{Config: cluster.Config})
	if err != nil {
		b.Fatal(err)
	}
	e, release := syncedEntry(b, r, ResourceEvents)
	defer release()
	ns := e.key.Namespace
	base := time.Now()
	// spawnkit's index, and a client-go store as an informer's would
	// hold them: both hold every event.
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for i := range benchPods {
		for j := range benchEventsPerPod {
			ev := &corev1.Event{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ev-%d-%d", i, j)},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("jupyter-user-%d", i),
					UID: types.UID(fmt.Sprintf("uid-%d", i))},
				Reason: "Started", LastTimestamp: metav1.NewTime(base.Add(time.Duration(j) * time.Second)),
			}
			_ = store.Add(ev)
			e.events.put(ev)
		}
	}
	events := &Events{h: handle{r: r, e: e}}
	ctx := b.Context()
	var ours time.Duration
	b.Run("spawnkit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			evs, err := events.ForPod(ctx, ns, benchTargetPodName)
			if err != nil || len(evs) != benchEventsPerPod {
				b.Fatal(len(evs), err)
			}
		}
		ours = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("client-go-scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for _, o := range store.List() {
				if ev := o.(*corev1.Event); ev.InvolvedObject.Name == benchTargetPodName && ev.InvolvedObject.Namespace == ns {
					n++
				}
			}
			if n != benchEventsPerPod {
				b.Fatal(n)
			}
		}
		raw := b.Elapsed() / time.Duration(b.N)
		b.ReportMetric(float64(ours)/float64(raw), "spawnkit/client-go")
	})
}

// BenchmarkHeapPerPod measures the heap a cached pod costs, with and
// without TransformPod, for a realistic spawnkit pod (running, as a
// kubelet reports it) as the API server returns it, managedFields
// included. Each pod is decoded separately from the server's JSON, as a
// watch decodes each object, so no two pods share a string; what the
// transform drops becomes garbage, and the heap that stays after a GC is
// what the cache costs, its store and indexes included. docs/performance.md quotes its figures.
func BenchmarkHeapPerPod(b *testing.B) {
	ns, tmpl := realisticPodInNewNamespace(b, "heap-")
	raw, err := cluster.Client.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").Name(tmpl.Name).
		SetHeader("Accept", "application/json").DoRaw(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	decoder := scheme.Codecs.UniversalDeserializer()
	// Distinct names, uids, users (one server each) and start ids, of
	// the lengths the server's have, so that no pod's own strings are
	// shared with another's.
	name := strings.Repeat("n", len(tmpl.Name)-6)
	uid := strings.Repeat("u", len(tmpl.UID)-6)
	startID := tmpl.Annotations["spawnkit.dev/start-id"]
	docs := make([][]byte, benchPods)
	for i := range docs {
		doc := bytes.Replace(raw, []byte(`"name":"`+tmpl.Name+`"`), []byte(fmt.Sprintf(`"name":"%s%06d"`, name, i)), 1)
		doc = bytes.Replace(doc, []byte(string(tmpl.UID)), []byte(fmt.Sprintf("%s%06d", uid, i)), 1)
		doc = bytes.ReplaceAll(doc, []byte("alice"), []byte(fmt.Sprintf("u%04d", i)))
		docs[i] = bytes.Replace(doc, []byte(startID), []byte(fmt.Sprintf("%s%06d", startID[:len(startID)-6], i)), 1)
	}
	measure := func(transform bool) float64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		// The store with a pod informer's indexes, and the uid map its
		// handler builds.
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		uids := newPodUIDs()
		rawUIDs := map[types.UID]*corev1.Pod{}
		for _, doc := range docs {
			decoded, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			obj := any(decoded)
			if transform {
				obj, _ = TransformPod(obj)
			}
			_ = indexer.Add(obj)
			switch pod := obj.(type) {
			case *Pod:
				uids.observe(pod, false)
			case *corev1.Pod:
				rawUIDs[pod.UID] = pod
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := len(indexer.ListKeys()); n != benchPods {
			b.Fatalf("%d pods cached, want %d", n, benchPods)
		}
		runtime.KeepAlive(indexer)
		runtime.KeepAlive(uids)
		runtime.KeepAlive(rawUIDs)
		return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / benchPods
	}
	var with, without float64
	for b.Loop() {
		without = measure(false)
		with = measure(true)
	}
	b.ReportMetric(without, "B/pod-raw")
	b.ReportMetric(with, "B/pod-transformed")
	b.ReportMetric(with/without, "transformed/raw")
}

// BenchmarkNewPod is the informer's transform of one decoded pod (a
// realistic running server's) into the compact cached Pod: it runs on
// every pod update the informer receives.
func BenchmarkNewPod(b *testing.B) {
	_, tmpl := realisticPodInNewNamespace(b, "newpod-")
	pods := make([]*corev1.Pod, 256)
	for i := range pods {
		pods[i] = clonePod(tmpl, i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = NewPod(pods[i%len(pods)])
		i++
	}
}

// realisticPodInNewNamespace creates a namespace named from prefix and
// one realistic pod in it (realisticPod).
func realisticPodInNewNamespace(b *testing.B, prefix string) (string, *corev1.Pod) {
	b.Helper()
	testcluster.Require(b, cluster)
	ns, err := cluster.Client.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return ns.Name, realisticPod(b, ns.Name)
}
