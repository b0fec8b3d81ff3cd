package spawner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 2}, &cluster)
}

var (
	registryOnce sync.Once
	registry     *reflector.Registry
)

func sharedRegistry(t testing.TB) *reflector.Registry {
	t.Helper()
	c := testcluster.Require(t, cluster)
	registryOnce.Do(func() {
		var err error
		if registry, err = reflector.New(reflector.Options{Config: c.Config}); err != nil {
			t.Fatal(err)
		}
		testcluster.AtExit(registry.Close)
	})
	return registry
}

func newNamespace(t testing.TB) string {
	t.Helper()
	ns, err := cluster.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spawn-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func baseConfig(ns string) kubespawner.Config {
	return kubespawner.Config{
		Namespace: ns,
		Pod:       manifest.PodSpec{Image: "quay.io/jupyter/base-notebook:2024-01-01"},
		Cmd:       []string{"jupyterhub-singleuser"},
	}
}

func newSpawner(t testing.TB, server naming.Server, cfg kubespawner.Config) *Spawner {
	t.Helper()
	s, err := New(server, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// hubStart is what a hub passes to every start: its token and cmd.
func hubStart() StartOptions {
	return StartOptions{Env: []corev1.EnvVar{{Name: "JUPYTERHUB_API_TOKEN", Value: "secret"}}}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStartPollStop(t *testing.T) {
	ns := newNamespace(t)
	s := newSpawner(t, naming.Server{Username: "Alice@Example.com", Servername: "gpu", UserID: 7}, baseConfig(ns))
	ctx := ctxTimeout(t, 60*time.Second)

	// The stream is registered with the call: nothing can be missed.
	stream := NewStream()
	opts := hubStart()
	opts.OnProgress = stream.Publish
	begin := time.Now()
	url, err := s.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start to URL: %s", time.Since(begin).Round(time.Millisecond))
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("http://%s:8888", pod.Status.PodIP); url != want {
		t.Errorf("URL = %q, want %q", url, want)
	}
	if pod.Labels[naming.LabelManagedBy] != naming.ManagedBySpawnkit || pod.Annotations[naming.AnnotationUsername] != "Alice@Example.com" ||
		pod.Annotations[naming.AnnotationServername] != "gpu" {
		t.Errorf("pod labels %v / annotations %v lack spawnkit's marks", pod.Labels, pod.Annotations)
	}
	var token bool
	for _, e := range pod.Spec.Containers[0].Env {
		token = token || e.Name == "JUPYTERHUB_API_TOKEN"
	}
	if !token || pod.Spec.Containers[0].Args[0] != "jupyterhub-singleuser" {
		t.Errorf("pod lacks the hub's env or cmd: %+v", pod.Spec.Containers[0])
	}

	// Progress replays the whole Start to every reader.
	for reader := range 2 {
		var evs []ProgressEvent
		for e := range stream.Events(ctx, 0) {
			evs = append(evs, e)
		}
		if len(evs) < 2 {
			t.Fatalf("reader %d: %d progress events, want pod events and a final one", reader, len(evs))
		}
		last := evs[len(evs)-1]
		if !last.Ready || last.URL != url || last.Progress != 100 {
			t.Errorf("final event = %+v", last)
		}
		prev, podEvents := 0, 0
		for _, e := range evs[:len(evs)-1] {
			if e.Progress < prev || e.Progress >= 90 {
				t.Errorf("event %+v: progress must not fall, and stay below 90 before the end", e)
			}
			if e.Event != nil {
				podEvents++
			}
			prev = e.Progress
		}
		if podEvents == 0 {
			t.Errorf("reader %d: no pod events in %+v", reader, evs)
		}
	}

	status, err := s.Poll(ctx)
	if err != nil || !status.Running || status.URL != url {
		t.Fatalf("Poll = %+v, %v; want running at %s", status, err, url)
	}
	if err := s.Stop(ctx, StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if status, err := s.Poll(ctx); err != nil || status.Running || status.ExitCode != 1 {
		t.Errorf("Poll after Stop = %+v, %v; want exited 1", status, err)
	}
}

func TestStalePodIsReplaced(t *testing.T) {
	ns := newNamespace(t)
	srv := naming.Server{Username: "bob"}
	s := newSpawner(t, srv, baseConfig(ns))
	ctx := ctxTimeout(t, 60*time.Second)
	// A pod of an earlier start of this server (its annotations name it).
	stale, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.State().PodName, Labels: map[string]string{"component": "singleuser-server"},
			Annotations: map[string]string{naming.AnnotationUsername: "bob", naming.AnnotationStartID: "earlier"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "old", Image: "old"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.UID == stale.UID || pod.Spec.Containers[0].Name != manifest.ContainerName {
		t.Error("the stale pod was not replaced")
	}
}

func TestUnattributedPodIsNeverDeleted(t *testing.T) {
	ns := newNamespace(t)
	s := newSpawner(t, naming.Server{Username: "bobby"}, baseConfig(ns))
	ctx := ctxTimeout(t, 60*time.Second)
	// A pod made by hand under the server's name, without owner annotations.
	other, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.State().PodName, Labels: map[string]string{"component": "singleuser-server"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "mine", Image: "mine"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Start(ctx, hubStart())
	var ce *CollisionError
	if !errors.As(err, &ce) || ce.Have != nil || ce.Kind != "Pod" {
		t.Fatalf("Start = %v; want a CollisionError naming no owner", err)
	}
	for _, op := range []func() error{
		func() error { return s.Stop(ctx, StopOptions{Now: true}) },
	} {
		if err := op(); !IsCollision(err) {
			t.Errorf("Stop = %v; want a CollisionError", err)
		}
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
	if err != nil || pod.UID != other.UID {
		t.Fatalf("the unattributed pod was touched: %v, %v", pod, err)
	}
}

func TestImagePullFailureFailsFastAndCleansUp(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorImagePullError}
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	s := newSpawner(t, naming.Server{Username: "carol"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	begin := time.Now()
	_, err := s.Start(ctx, hubStart())
	var se *StartError
	if !errors.As(err, &se) || se.Step != StepWait || se.Reason != "ErrImagePull" {
		t.Fatalf("Start = %v; want a StartError at wait with an image pull reason", err)
	}
	if elapsed := time.Since(begin); elapsed > 30*time.Second {
		t.Errorf("failing took %s; a fatal reason must not wait for start_timeout", elapsed)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the failed pod is still there (err %v)", err)
	}
	// A start that got as far as the wait keeps the claim it created:
	// the next start (with the image fixed) needs the same one.
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, s.State().PVCName, metav1.GetOptions{}); err != nil {
		t.Errorf("the claim of a start that failed in its wait was not kept: %v", err)
	}
	stream := NewStream()
	opts := hubStart()
	opts.OnProgress = stream.Publish
	if _, err := s.Start(ctx, opts); err == nil {
		t.Fatal("the second Start succeeded with a missing image")
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, s.State().PVCName, metav1.GetOptions{}); err != nil {
		t.Errorf("a claim that existed before a failed Start must survive it: %v", err)
	}
	var final ProgressEvent
	for e := range stream.Events(ctx, 0) {
		final = e
	}
	if !final.Failed || !strings.Contains(final.Message, "ImagePull") && !strings.Contains(final.Message, "ErrImagePull") {
		t.Errorf("final progress event = %+v; want the failure and its reason", final)
	}
}

func TestStartTimeoutCleansUp(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady}
	cfg.StartTimeout = 2
	s := newSpawner(t, naming.Server{Username: "dave"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	_, err := s.Start(ctx, hubStart())
	if !errors.Is(err, ErrStartTimeout) {
		t.Fatalf("Start = %v; want ErrStartTimeout", err)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the timed-out pod is still there (err %v)", err)
	}
}

func TestPollReportsExitCode(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{
		testcluster.BehaviorAnnotation:  testcluster.BehaviorExit,
		testcluster.ExitCodeAnnotation:  "3",
		testcluster.ExitAfterAnnotation: "1s",
	}
	s := newSpawner(t, naming.Server{Username: "erin"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	sub := sharedRegistry(t).Subscribe(ns, s.State().PodName)
	defer sub.Close()
	for {
		status, err := s.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !status.Running {
			if status.ExitCode != 3 {
				t.Fatalf("Poll = %+v; want exit code 3", status)
			}
			break
		}
		select {
		case <-sub.C():
		case <-ctx.Done():
			t.Fatal("the pod never exited")
		}
	}
	// delete_stopped_pods (default on) removed the pod.
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stopped pod was not deleted (err %v)", err)
	}
}

func TestPollWithAFreshRegistryNeverSaysExited(t *testing.T) {
	ns := newNamespace(t)
	s := newSpawner(t, naming.Server{Username: "frank"}, baseConfig(ns))
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	// A hub restarting: a new registry, a Spawner from saved state, and a
	// Poll before any informer has listed.
	fresh, err := reflector.New(reflector.Options{Config: cluster.Config})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(naming.Server{Username: "frank"}, Options{Client: cluster.Client, Registry: fresh, Config: baseConfig("other-namespace")})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	s2.LoadState(s.State())
	status, err := s2.Poll(ctx)
	if err != nil || !status.Running {
		t.Fatalf("Poll from a fresh registry = %+v, %v; want running", status, err)
	}
	if err := s2.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

func TestUserNamespaces(t *testing.T) {
	cfg := baseConfig("jhub")
	cfg.EnableUserNamespaces = true
	s := newSpawner(t, naming.Server{Username: "grace"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	if s.State().Namespace != "jhub-grace" {
		t.Fatalf("namespace = %q", s.State().Namespace)
	}
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	ns, err := cluster.Client.CoreV1().Namespaces().Get(ctx, "jhub-grace", metav1.GetOptions{})
	if err != nil || ns.Labels[naming.LabelManagedBy] != naming.ManagedBySpawnkit {
		t.Fatalf("user namespace: %v, %v", ns, err)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentStarts(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 120*time.Second)
	const n = 50
	spawners := make([]*Spawner, n)
	for i := range spawners {
		spawners[i] = newSpawner(t, naming.Server{Username: fmt.Sprintf("user%d", i)}, baseConfig(ns))
	}
	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range spawners {
		g.Go(func() error {
			_, err := s.Start(gctx, hubStart())
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d concurrent Starts on one registry: %s", n, time.Since(begin).Round(time.Millisecond))
	for _, s := range spawners {
		if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	cfg, err := kubespawner.Load([]byte(`
image: quay.io/jupyter/scipy-notebook:2024-01-01
cpu_limit: 2
mem_guarantee: 1G
pod_name_template: "lab-{username}"
enable_user_namespaces: true
storage_pvc_ensure: true
storage_capacity: 10Gi
start_timeout: 120
environment:
  FOO: bar
extra_labels:
  team: "{username}"
tolerations:
- key: hub.jupyter.org/dedicated
  operator: Equal
  value: user
  effect: NoSchedule
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pod.Image != "quay.io/jupyter/scipy-notebook:2024-01-01" || cfg.Pod.CPULimit.String() != "2" ||
		cfg.Pod.MemGuarantee.Value() != 1<<30 || cfg.PodNameTemplate != "lab-{username}" || !cfg.EnableUserNamespaces ||
		!cfg.StoragePVCEnsure || cfg.StorageCapacity.String() != "10Gi" || cfg.StartTimeout != 120 ||
		cfg.Environment["FOO"] != "bar" || len(cfg.Pod.Tolerations) != 1 || cfg.ExtraLabels["team"] != "{username}" {
		t.Errorf("config = %+v", cfg)
	}
	for _, bad := range []string{"imagee: x", "cpu_limit: lots", "start_timeout: soon", "port: http"} {
		if _, err := kubespawner.Load([]byte(bad)); err == nil {
			t.Errorf("kubespawner.Load(%q) succeeded", bad)
		} else if key := strings.SplitN(bad, ":", 2)[0]; !strings.Contains(err.Error(), key) && !strings.Contains(err.Error(), "Config.") {
			t.Errorf("kubespawner.Load(%q): error %q does not name the key", bad, err)
		}
	}
}

func TestNewRejectsBadNames(t *testing.T) {
	cfg := baseConfig("default")
	cfg.SlugScheme = naming.SchemeEscape
	_, err := New(naming.Server{Username: strings.Repeat(".", 40)}, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err == nil || !naming.IsInvalidName(err) {
		t.Fatalf("New with a name the API would reject = %v; want an InvalidNameError", err)
	}
}
