package manager

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// vectorCase returns a case of the KubeSpawner config vectors (the
// spawner package's testdata) by name.
func vectorCase(t *testing.T, name string) configCase {
	t.Helper()
	data, err := os.ReadFile("../spawner/testdata/config-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []configCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range file.Cases {
		if c.Name == name && c.Expected != nil {
			return c
		}
	}
	t.Fatalf("no config vector %q", name)
	return configCase{}
}

// configCase is the part of a config vector these tests read.
type configCase struct {
	Name string `json:"name"`
	User struct {
		Name string
	} `json:"user"`
	ServerName string `json:"server_name"`
	Expected   *struct {
		Pod   json.RawMessage `json:"pod"`
		PVC   json.RawMessage `json:"pvc"`
		State json.RawMessage `json:"state"`
	} `json:"expected"`
}

// TestManagerAdoptKubeSpawner: a pod exactly as KubeSpawner 7 creates it
// (a config vector's expected pod) is recovered as running with its URL,
// polled and stopped by a Manager with AdoptKubeSpawner, and left alone
// by one without it.
func TestManagerAdoptKubeSpawner(t *testing.T) {
	c := vectorCase(t, "defaults_default_server")
	var pod corev1.Pod
	if err := json.Unmarshal(c.Expected.Pod, &pod); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	pod.Namespace = ns
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := naming.Server{Username: c.User.Name, Servername: c.ServerName}
	running, err := cluster.WaitForPod(ctx, ns, pod.Name, func(p *corev1.Pod) (bool, error) {
		return p != nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("the KubeSpawner pod never ran: %v", err)
	}
	ip := running.Status.PodIP

	t.Run("without the option", func(t *testing.T) {
		m, stop := runManager(t, Options{Config: baseConfig(ns)})
		defer stop()
		<-m.ready
		settle(t, m)
		if st, err := m.Status(srv); err == nil {
			t.Fatalf("a KubeSpawner pod was adopted without AdoptKubeSpawner: %+v", st)
		}
	})

	t.Run("with the option", func(t *testing.T) {
		m, stop := runManager(t, Options{Config: baseConfig(ns), AdoptKubeSpawner: true})
		defer stop()
		st := waitStatus(t, m, srv, "running", phaseIs(PhaseRunning))
		if want := "http://" + ip + ":8888"; st.URL != want {
			t.Errorf("URL = %q, want %q", st.URL, want)
		}
		if st.State.PodName != pod.Name || st.State.Namespace != ns {
			t.Errorf("state = %+v, want pod %s/%s", st.State, ns, pod.Name)
		}
		polled, err := m.Poll(ctx, srv)
		if err != nil || polled.Phase != PhaseRunning || !polled.Ready {
			t.Fatalf("Poll = %+v, %v; want running and ready", polled, err)
		}
		if _, err := m.Stop(ctx, srv, spawner.StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, m, srv, "stopped", phaseIs(PhaseStopped))
		if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after Stop the KubeSpawner pod is still there (err %v)", err)
		}
	})
}

// TestManagerAdoptKubeSpawnerStarting: a KubeSpawner pod not ready yet
// (it cannot be scheduled) is recovered as starting, and Stop deletes it.
func TestManagerAdoptKubeSpawnerStarting(t *testing.T) {
	c := vectorCase(t, "defaults_default_server")
	var pod corev1.Pod
	if err := json.Unmarshal(c.Expected.Pod, &pod); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	pod.Namespace = ns
	pod.Spec.NodeSelector = map[string]string{"spawnkit.dev/no-such-node": "true"}
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := naming.Server{Username: c.User.Name, Servername: c.ServerName}
	m, stop := runManager(t, Options{Config: baseConfig(ns), AdoptKubeSpawner: true})
	defer stop()
	st := waitStatus(t, m, srv, "starting", phaseIs(PhaseStarting))
	if st.State.PodName != pod.Name {
		t.Errorf("state = %+v, want pod %s", st.State, pod.Name)
	}
	if _, err := m.Stop(ctx, srv, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, srv, "stopped", phaseIs(PhaseStopped))
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after Stop the KubeSpawner pod is still there (err %v)", err)
	}
}

// createKubeSpawnerServer creates in ns the pod (and claim, if any) of a
// config vector exactly as KubeSpawner 7.1 makes them, the claim of the
// cluster's storage class so that the pod schedules, waits until the pod
// runs, and returns it and KubeSpawner's state for it (get_state: the
// hub's database), in ns.
func createKubeSpawnerServer(t *testing.T, ctx context.Context, c configCase, ns string) (*corev1.Pod, spawner.State) {
	t.Helper()
	var pod corev1.Pod
	if err := json.Unmarshal(c.Expected.Pod, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Namespace = ns
	var claim corev1.PersistentVolumeClaim
	if len(c.Expected.PVC) > 0 {
		if err := json.Unmarshal(c.Expected.PVC, &claim); err != nil {
			t.Fatal(err)
		}
	}
	if claim.Name != "" { // the vectors' {} is no claim
		claim.Namespace = ns
		claim.Spec.StorageClassName, claim.Spec.Selector = ptr.To(testcluster.StorageClass), nil
		delete(claim.Annotations, "volume.beta.kubernetes.io/storage-class")
		if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
			pod = *p
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("KubeSpawner's pod %s/%s is not running: %v", ns, pod.Name, p.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
	var st spawner.State
	if err := json.Unmarshal(c.Expected.State, &st); err != nil {
		t.Fatal(err)
	}
	st.Namespace = ns
	return &pod, st
}

// TestManagerSeedKubeSpawner: the hub's state of a server KubeSpawner
// started (its get_state, as the config vectors record it) given to a
// Manager with AdoptKubeSpawner (Seed):
//   - a KubeSpawner pod the Manager recovered at today's name takes the
//     claim KubeSpawner's state names (its pod records none), kept once
//     stopped for the next start;
//   - a KubeSpawner pod under another pod_name_template than today's,
//     which recovery does not trust, is adopted through the hub's state:
//     running with its URL, stopped by Stop;
//   - without AdoptKubeSpawner the state is refused, naming the
//     service's flag, and the pod is left alone.
func TestManagerSeedKubeSpawner(t *testing.T) {
	t.Run("claim", func(t *testing.T) {
		c := vectorCase(t, "storage_full")
		ns := newNamespace(t)
		ctx := ctxTimeout(t, 90*time.Second)
		pod, st := createKubeSpawnerServer(t, ctx, c, ns)
		srv := naming.Server{Username: c.User.Name, Servername: c.ServerName}
		m, stop := runManager(t, Options{Config: baseConfig(ns), AdoptKubeSpawner: true})
		defer stop()
		waitStatus(t, m, srv, "recovered running", phaseIs(PhaseRunning))
		got, err := m.Seed(ctx, Seed{Server: srv, State: st})
		if err != nil {
			t.Fatal(err)
		}
		if got.Phase != PhaseRunning || got.State.PodName != pod.Name || got.State.PVCName != st.PVCName || st.PVCName == "" {
			t.Fatalf("Seed = %s, state %+v; want running on %s with claim %q", got.Phase, got.State, pod.Name, st.PVCName)
		}
		stopped, err := m.Stop(ctx, srv, spawner.StopOptions{Now: true})
		if err != nil {
			t.Fatal(err)
		}
		if stopped.State.PVCName != st.PVCName {
			t.Errorf("after Stop the state names claim %q, want %q", stopped.State.PVCName, st.PVCName)
		}
		if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after Stop the KubeSpawner pod is still there (err %v)", err)
		}
	})
	t.Run("another pod name", func(t *testing.T) {
		c := vectorCase(t, "custom_name_templates")
		ns := newNamespace(t)
		ctx := ctxTimeout(t, 90*time.Second)
		pod, st := createKubeSpawnerServer(t, ctx, c, ns)
		srv := naming.Server{Username: c.User.Name, Servername: c.ServerName}
		m, stop := runManager(t, Options{Config: baseConfig(ns), AdoptKubeSpawner: true})
		defer stop()
		<-m.ready
		if got, err := m.Status(srv); err == nil {
			t.Fatalf("a pod not at today's name was recovered without the hub's state: %+v", got)
		}
		got, err := m.Seed(ctx, Seed{Server: srv, State: st})
		if err != nil {
			t.Fatal(err)
		}
		if want := "http://" + pod.Status.PodIP + ":8888"; got.Phase != PhaseRunning || got.URL != want || got.State.PodName != pod.Name {
			t.Fatalf("Seed = %s %q, state %+v; want running at %s on %s", got.Phase, got.URL, got.State, want, pod.Name)
		}
		if polled, err := m.Poll(ctx, srv); err != nil || polled.Phase != PhaseRunning {
			t.Fatalf("Poll = %+v, %v; want running", polled, err)
		}
		if _, err := m.Stop(ctx, srv, spawner.StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after Stop the KubeSpawner pod is still there (err %v)", err)
		}
	})
	t.Run("without the option", func(t *testing.T) {
		c := vectorCase(t, "defaults_default_server")
		ns := newNamespace(t)
		ctx := ctxTimeout(t, 90*time.Second)
		pod, st := createKubeSpawnerServer(t, ctx, c, ns)
		srv := naming.Server{Username: c.User.Name, Servername: c.ServerName}
		m, stop := runManager(t, Options{Config: baseConfig(ns)})
		defer stop()
		_, err := m.Seed(ctx, Seed{Server: srv, State: st})
		if !errors.Is(err, ErrStateRefused) || !strings.Contains(err.Error(), "-adopt-kubespawner") || !strings.Contains(err.Error(), pod.Name) {
			t.Fatalf("Seed = %v; want ErrStateRefused naming the pod and -adopt-kubespawner", err)
		}
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
			t.Errorf("the KubeSpawner pod was touched: %v, %v", p, err)
		}
	})
}
