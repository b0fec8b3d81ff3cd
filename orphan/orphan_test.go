package orphan

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.APIServer}, &cluster)
}

func newNamespace(t testing.TB, labels, annotations map[string]string) string {
	t.Helper()
	ns, err := cluster.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "orphan-", Labels: labels, Annotations: annotations},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// meta makes an object's metadata as spawnkit writes it; user "" leaves
// the annotations out.
func meta(name, user, server string, labelled bool) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}
	if labelled {
		m.Labels["app.kubernetes.io/managed-by"] = "spawnkit"
	}
	if user != "" {
		m.Annotations[naming.AnnotationUsername] = user
		if server != "" {
			m.Annotations[naming.AnnotationServername] = server
		}
	}
	return m
}

func createPod(t testing.TB, ns string, m metav1.ObjectMeta) *corev1.Pod {
	t.Helper()
	pod, err := cluster.Client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: m, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

type found struct {
	kind   Kind
	name   string
	reason Reason
}

func summary(orphans []Orphan, namespaces ...string) []found {
	var out []found
	for _, o := range orphans {
		if o.Kind == KindNamespace || slices.Contains(namespaces, o.Namespace) {
			out = append(out, found{o.Kind, o.Name, o.Reason})
		}
	}
	return out
}

// scenario builds every orphan source in two namespaces and returns the
// hub's known servers.
func scenario(t *testing.T) (ns, oldNS, userNS string, known *Known) {
	t.Helper()
	ctx := context.Background()
	ns = newNamespace(t, nil, nil)
	oldNS = newNamespace(t, nil, nil)
	userNS = newNamespace(t, map[string]string{"app.kubernetes.io/managed-by": "spawnkit"},
		map[string]string{naming.AnnotationUsername: "gina"})
	known = NewKnown(4)
	known.Add("bob", "", false)
	known.Add("carol", "", true)
	known.Add("dave", "gpu", false)

	createPod(t, ns, meta("jupyter-alice", "alice", "", true))           // unknown server
	createPod(t, ns, meta("jupyter-bob", "bob", "", true))               // known but stopped
	createPod(t, ns, meta("jupyter-carol", "carol", "", true))           // fine
	createPod(t, ns, meta("jupyter-nolabel", "zed", "", false))          // not spawnkit's: never seen
	createPod(t, ns, meta("jupyter-mystery", "", "", true))              // unattributed
	createPod(t, oldNS, meta("oldtemplate-frank", "frank", "lab", true)) // old template and namespace

	// dave's secret and service outlived their pod (no garbage collector
	// at this level of the cluster).
	gone := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "jupyter-dave--gpu", UID: types.UID("no-such-pod")}
	sm := meta("jupyter-dave--gpu", "dave", "gpu", true)
	sm.OwnerReferences = []metav1.OwnerReference{gone}
	if _, err := cluster.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: sm}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: sm,
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8888}}, Selector: map[string]string{"a": "b"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// carol's secret, owned by her live pod: fine.
	carol, _ := cluster.Client.CoreV1().Pods(ns).Get(ctx, "jupyter-carol", metav1.GetOptions{})
	cm := meta("jupyter-carol", "carol", "", true)
	cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: carol.Name, UID: carol.UID}}
	if _, err := cluster.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: cm}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Claims: erin is unknown (orphan); bob's server is stopped (his claim
	// is his, not an orphan).
	for _, user := range []string{"erin", "bob"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: meta("claim-"+user, user, "", true), Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
		if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return ns, oldNS, userNS, known
}

func TestListFindsEverySource(t *testing.T) {
	testcluster.Require(t, cluster)
	ns, oldNS, userNS, known := scenario(t)
	orphans, err := List(t.Context(), known, Options{Client: cluster.Client})
	if err != nil {
		t.Fatal(err)
	}
	got := summary(orphans, ns, oldNS)
	want := []found{
		{KindPVC, "claim-erin", ReasonUserUnknown},
		{KindPod, "jupyter-alice", ReasonServerUnknown},
		{KindPod, "jupyter-bob", ReasonServerNotRunning},
		{KindPod, "jupyter-mystery", ReasonUnattributed},
		{KindPod, "oldtemplate-frank", ReasonServerUnknown},
		{KindSecret, "jupyter-dave--gpu", ReasonOwnerGone},
		{KindService, "jupyter-dave--gpu", ReasonOwnerGone},
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing orphan %+v", w)
		}
	}
	if !slices.Contains(got, found{KindNamespace, userNS, ReasonUserUnknown}) {
		t.Errorf("missing the empty namespace of unknown user gina")
	}
	for _, g := range got {
		if g.kind != KindNamespace && !slices.Contains(want, g) {
			t.Errorf("unexpected orphan %+v", g)
		}
	}
	for _, o := range orphans {
		if o.Name == "oldtemplate-frank" && (o.Server != (ServerKey{"frank", "lab"}) || !o.Attributed || o.Namespace != oldNS) {
			t.Errorf("old-template pod attributed as %+v", o)
		}
		if o.Name == "jupyter-nolabel" {
			t.Error("an object without spawnkit's label was listed")
		}
	}
}

func TestCleanupSafety(t *testing.T) {
	testcluster.Require(t, cluster)
	ns, oldNS, userNS, known := scenario(t)
	ctx := t.Context()
	orphans, err := List(ctx, known, Options{Client: cluster.Client, Namespaces: []string{ns, oldNS}})
	if err != nil {
		t.Fatal(err)
	}
	_ = userNS

	// Dry run and the default minimum age delete nothing.
	for name, opts := range map[string]CleanupOptions{
		"dry run":     {Client: cluster.Client, DryRun: true, MinAge: NoMinAge},
		"default age": {Client: cluster.Client},
	} {
		report, err := Cleanup(ctx, orphans, opts)
		if err != nil || len(report.Deleted) != 0 || len(report.Failed) != 0 || len(report.Skipped) != len(orphans) {
			t.Errorf("%s: %d deleted, %d skipped, %d failed, %v", name, len(report.Deleted), len(report.Skipped), len(report.Failed), err)
		}
	}

	// Alice's pod is re-created between List and Cleanup: the new one
	// must survive.
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, "jupyter-alice", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	recreated := createPod(t, ns, meta("jupyter-alice", "alice", "", true))

	// Two cleanups of the same list at once.
	var wg sync.WaitGroup
	reports := make([]Report, 2)
	for i := range reports {
		wg.Go(func() {
			var err error
			reports[i], err = Cleanup(ctx, orphans, CleanupOptions{Client: cluster.Client, MinAge: NoMinAge, Concurrency: 3})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	deleted := map[string]int{}
	for _, r := range reports {
		for _, f := range r.Failed {
			t.Errorf("failed: %v: %v", f.Orphan, f.Err)
		}
		for _, d := range r.Deleted {
			deleted[string(d.Kind)+"/"+d.Name]++
		}
	}
	for _, want := range []string{"Pod/jupyter-bob", "Pod/oldtemplate-frank", "Secret/jupyter-dave--gpu", "Service/jupyter-dave--gpu"} {
		if deleted[want] != 1 {
			t.Errorf("%s deleted %d times across both cleanups, want once", want, deleted[want])
		}
	}
	for key := range deleted {
		if key == "Pod/jupyter-alice" || key == "PersistentVolumeClaim/claim-erin" || key == "Pod/jupyter-mystery" {
			t.Errorf("%s must not be deleted", key)
		}
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "jupyter-alice", metav1.GetOptions{})
	if err != nil || pod.UID != recreated.UID {
		t.Errorf("the re-created pod did not survive: %v", err)
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-erin", metav1.GetOptions{}); err != nil {
		t.Errorf("a claim was deleted without asking for its kind: %v", err)
	}

	// Claims go only when asked for by kind.
	var claims []Orphan
	for _, o := range orphans {
		if o.Kind == KindPVC {
			claims = append(claims, o)
		}
	}
	report, err := Cleanup(ctx, claims, CleanupOptions{Client: cluster.Client, MinAge: NoMinAge, Kinds: []Kind{KindPVC}})
	if err != nil || len(report.Deleted) != 1 {
		t.Fatalf("deleting claims by kind: %+v, %v", report, err)
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-erin", metav1.GetOptions{}); err == nil {
		// A claim may linger with its protection finalizer; it must at
		// least be terminating.
		got, _ := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-erin", metav1.GetOptions{})
		if got.DeletionTimestamp == nil {
			t.Error("claim-erin not deleted")
		}
	} else if !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

func TestListAtScale(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t, nil, nil)
	const n = 2000
	known := NewKnown(n)
	ctx := t.Context()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		user := fmt.Sprintf("user%04d", i)
		known.Add(user, "", i%10 != 0) // every tenth server is stopped
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			createPod(t, ns, meta("jupyter-"+user, user, "", true))
		})
	}
	wg.Wait()
	start := time.Now()
	orphans, err := List(ctx, known, Options{Client: cluster.Client, Namespaces: []string{ns}, Kinds: []Kind{KindPod}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("List over %d pods and %d known servers: %s", n, known.Len(), time.Since(start).Round(time.Millisecond))
	if len(orphans) != n/10 {
		t.Errorf("%d orphans, want %d (the stopped servers' pods)", len(orphans), n/10)
	}
}

func TestSweepersWithLeaderElection(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	known := func(context.Context) (*Known, error) { return NewKnown(0), nil }
	registries := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}

	sweepers := make([]*Sweeper, 2)
	for i := range sweepers {
		var err error
		sweepers[i], err = NewSweeper(SweeperOptions{
			Client: cluster.Client, Known: known, AllowEmptyKnown: true, Interval: 50 * time.Millisecond,
			List:       Options{Namespaces: []string{ns}},
			Cleanup:    CleanupOptions{MinAge: NoMinAge},
			Registerer: registries[i],
			LeaderElection: &LeaderElection{Namespace: ns, Name: "orphan-sweeper", Identity: fmt.Sprintf("replica-%d", i),
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 500 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, s := range sweepers {
		wg.Go(func() {
			if err := s.Start(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	// An orphan appears; exactly one sweeper must take it.
	createPod(t, ns, meta("jupyter-stray", "stray", "", true))
	testutil.Eventually(t, 20*time.Second, "the orphan to be swept", testutil.True(func() bool {
		_, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "jupyter-stray", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}))
	// Several more sweeps by the leader are several intervals in which a
	// second sweeper, had it swept at all, would have swept too.
	swept := sweepers[0].Sweeps() + sweepers[1].Sweeps()
	testutil.Eventually(t, 20*time.Second, "three more sweeps", testutil.True(func() bool {
		return sweepers[0].Sweeps()+sweepers[1].Sweeps() >= swept+3
	}))
	cancel()
	wg.Wait()
	a, b := sweepers[0].Sweeps(), sweepers[1].Sweeps()
	if (a == 0) == (b == 0) {
		t.Errorf("sweeps per replica: %d and %d; want exactly one replica sweeping", a, b)
	}
	t.Logf("sweeps per replica: %d and %d", a, b)
	// The metrics of the two replicas add up to one found and one deleted.
	var found, deleted float64
	for _, reg := range registries {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if c, ok := labels["cluster"]; !ok || c != "" {
					t.Errorf("%s: cluster label %q (present %v), want \"\" for the one unnamed cluster", f.GetName(), c, ok)
				}
				switch {
				case f.GetName() == "spawnkit_orphans_found_total" && labels["reason"] == string(ReasonServerUnknown):
					found += m.GetCounter().GetValue()
				case f.GetName() == "spawnkit_orphans_cleanup_total" && labels["outcome"] == "deleted":
					deleted += m.GetCounter().GetValue()
				}
			}
		}
	}
	if found < 1 || deleted != 1 {
		t.Errorf("metrics: %v found, %v deleted; want the stray pod found and deleted once", found, deleted)
	}
}
