package spawner

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/naming"
)

// runManager starts a manager and returns a function that stops it and
// waits for it.
func runManager(t *testing.T, cfg Config, interval time.Duration) (*Manager, func()) {
	t.Helper()
	m, err := NewManager(ManagerOptions{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg, ReconcileInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	return m, stop
}

// waitPhase waits for a server's phase, woken by its pod's subscription
// or, between wake-ups, by a short tick (the manager's own state has no
// subscription).
func waitPhase(t *testing.T, m *Manager, s naming.Server, want Phase) ServerStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, ok := m.Status(s); ok && st.Phase == want {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := m.Status(s)
	t.Fatalf("server %+v: phase %s (err %v), want %s", s, st.Phase, st.Err, want)
	return st
}

func TestManagerSpawnWithEventStreams(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	m, stop := runManager(t, cfg, time.Minute)
	defer stop()
	servers := []naming.Server{{Username: "m-alice"}, {Username: "m-bob", Servername: "x"}}
	for _, s := range servers {
		if err := m.Spawn(t.Context(), s, SpawnOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Spawn(t.Context(), servers[0], SpawnOptions{}); !errors.Is(err, ErrBusy) {
		// The first start may already have finished; a second Spawn of a
		// running server is then not busy but harmless.
		if st, _ := m.Status(servers[0]); st.Phase == PhaseStarting {
			t.Errorf("second Spawn during a start = %v, want ErrBusy", err)
		}
	}
	// Several subscribers each get the whole stream, ending in the final
	// event.
	var wg sync.WaitGroup
	finals := make([]ProgressEvent, 4)
	for i := range finals {
		wg.Go(func() {
			for e := range m.Events(t.Context(), servers[i%2]) {
				finals[i] = e
			}
		})
	}
	wg.Wait()
	for i, f := range finals {
		if !f.Ready || f.Progress != 100 {
			t.Errorf("subscriber %d ended on %+v, want the ready event", i, f)
		}
	}
	for _, s := range servers {
		st := waitPhase(t, m, s, PhaseRunning)
		if st.URL == "" {
			t.Errorf("%+v running without a URL", s)
		}
	}
	if got := m.List(); len(got) != 2 || got[0].Server.Username != "m-alice" {
		t.Errorf("List = %+v", got)
	}
	for _, s := range servers {
		if err := m.Stop(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if st, _ := m.Status(s); st.Phase != PhaseStopped {
			t.Errorf("after Stop: %s", st.Phase)
		}
	}
}

func TestManagerRecoversFromTheCluster(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	ctx := t.Context()

	// A previous hub process started two servers and one that cannot
	// pull its image, then went away.
	running := naming.Server{Username: "r-running"}
	s := newSpawner(t, running, cfg)
	if _, err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	failing := naming.Server{Username: "r-failing"}
	badCfg := cfg
	badCfg.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorImagePullError}
	fs := newSpawner(t, failing, badCfg)
	pod, err := fs.buildPod(fs.State())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod that is not spawnkit's is never adopted.
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Labels: map[string]string{"component": "singleuser-server"},
			Annotations: map[string]string{naming.AnnotationUsername: "intruder"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	m, stop := runManager(t, cfg, 200*time.Millisecond)
	defer stop()
	st := waitPhase(t, m, running, PhaseRunning)
	if st.State.PodName != s.State().PodName || st.URL == "" {
		t.Errorf("recovered %+v", st)
	}
	failed := waitPhase(t, m, failing, PhaseFailed)
	if failed.Err == nil {
		t.Error("failed server without a reason")
	}
	if _, ok := m.Status(naming.Server{Username: "intruder"}); ok {
		t.Error("adopted a pod spawnkit did not create")
	}

	// Drift: the pod disappears behind the hub's back.
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, s.State().PodName, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, m, running, PhaseStopped)
}

func TestManagerNotRunning(t *testing.T) {
	m, err := NewManager(ManagerOptions{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig("default")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := m.Spawn(ctx, naming.Server{Username: "x"}, SpawnOptions{}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Spawn without Start = %v, want ErrNotRunning", err)
	}
}

func TestManagerSpawnUsesEachStartsProfile(t *testing.T) {
	ns := newNamespace(t)
	cfg, err := LoadConfig([]byte(`
namespace: ` + ns + `
image: base:1
cmd: [jupyterhub-singleuser]
profile_list:
- display_name: Base
- display_name: Big
  kubespawner_override: {image: "big:2"}
`))
	if err != nil {
		t.Fatal(err)
	}
	m, stop := runManager(t, cfg, time.Minute)
	defer stop()
	srv := naming.Server{Username: "p-user"}
	for _, tc := range []struct{ profile, image string }{{"", "base:1"}, {"big", "big:2"}} {
		if err := m.Spawn(t.Context(), srv, SpawnOptions{UserOptions: map[string]string{"profile": tc.profile}}); err != nil {
			t.Fatal(err)
		}
		st := waitPhase(t, m, srv, PhaseRunning)
		pod, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), st.State.PodName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Spec.Containers[0].Image; got != tc.image {
			t.Errorf("profile %q: image %s, want %s", tc.profile, got, tc.image)
		}
		if err := m.Stop(t.Context(), srv); err != nil {
			t.Fatal(err)
		}
	}
}
