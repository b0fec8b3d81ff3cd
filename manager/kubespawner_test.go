package manager

import (
	"encoding/json"
	"github.com/spawnkit/spawnkit/spawner"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
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
		Pod json.RawMessage `json:"pod"`
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
	var ip string
	for ctx.Err() == nil {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ip = p.Status.PodIP; ip != "" && p.Status.Phase == corev1.PodRunning {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Run("without the option", func(t *testing.T) {
		m, stop := runManager(t, Options{Config: baseConfig(ns)})
		defer stop()
		<-m.ready
		time.Sleep(500 * time.Millisecond)
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
