package jupyterhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

// kubeSpawnerServer is a server a KubeSpawner 7.1 hub started: a config
// vector's pod and claim (spawner/testdata/config-vectors.json,
// expected.pod and expected.pvc: what KubeSpawner's get_pod_manifest and
// get_pvc_manifest return) and KubeSpawner's state for it
// (expected.state: its get_state).
type kubeSpawnerServer struct {
	user, server string
	// pod and claim are the objects as created (claim nil without
	// storage); the pod is Running with its IP once create returns.
	pod   *corev1.Pod
	claim *corev1.PersistentVolumeClaim
	state map[string]any
}

func (k *kubeSpawnerServer) String() string { return k.user + ":" + k.server }

// logName is the server's name in JupyterHub's log (Spawner._log_name).
func (k *kubeSpawnerServer) logName() string {
	if k.server == "" {
		return k.user
	}
	return k.user + ":" + k.server
}

// vectorSpawn is a spawn of the KubeSpawner vectors: the objects
// KubeSpawner made (expected.pod, expected.pvc, {} for none) and its
// get_state after the start (expected.state).
type vectorSpawn struct {
	User struct {
		Name string `json:"name"`
	} `json:"user"`
	ServerName string `json:"server_name"`
	Expected   *struct {
		Pod   json.RawMessage `json:"pod"`
		PVC   json.RawMessage `json:"pvc"`
		State map[string]any  `json:"state"`
	} `json:"expected"`
}

// server is the spawn's server, checked to be KubeSpawner's.
func (v vectorSpawn) server(t *testing.T, what string) *kubeSpawnerServer {
	t.Helper()
	if v.Expected == nil {
		t.Fatalf("%s: KubeSpawner made nothing", what)
	}
	k := &kubeSpawnerServer{user: v.User.Name, server: v.ServerName, pod: &corev1.Pod{}, state: v.Expected.State}
	if err := json.Unmarshal(v.Expected.Pod, k.pod); err != nil {
		t.Fatalf("%s: pod: %v", what, err)
	}
	var claim corev1.PersistentVolumeClaim
	if err := json.Unmarshal(v.Expected.PVC, &claim); err != nil {
		t.Fatalf("%s: claim: %v", what, err)
	}
	if claim.Name != "" { // {} is no claim
		k.claim = &claim
	}
	if k.pod.Labels[naming.LabelManagedBy] != naming.ManagedByKubeSpawner || k.state["kubespawner_version"] == nil {
		t.Fatalf("%s is not KubeSpawner's: labels %v, state %v", what, k.pod.Labels, k.state)
	}
	return k
}

// loadKubeSpawnerServer reads a config vector's objects and state.
func loadKubeSpawnerServer(t *testing.T, name string) *kubeSpawnerServer {
	t.Helper()
	var file struct {
		Cases []struct {
			Name string `json:"name"`
			vectorSpawn
		} `json:"cases"`
	}
	readVectors(t, "config-vectors.json", &file)
	for _, c := range file.Cases {
		if c.Name == name {
			return c.server(t, "config vector "+name)
		}
	}
	t.Fatalf("no config vector %q", name)
	return nil
}

// loadZ2JHServer reads the objects and state of user's spawn in a z2jh
// value set (spawner/testdata/z2jh-vectors.json: KubeSpawner 7.1 under
// the chart's hub configuration, in the release's namespace jhub). As
// KubeSpawner would have run them in the test's namespace, and with the
// cluster's scheduler (the chart's user scheduler is not here), the
// pod's schedulerName is dropped and the state's namespace and dns_name
// are the test namespace's.
func loadZ2JHServer(t *testing.T, set, user string) *kubeSpawnerServer {
	t.Helper()
	var file struct {
		Cases []struct {
			Name   string        `json:"name"`
			Spawns []vectorSpawn `json:"spawns"`
		} `json:"cases"`
	}
	readVectors(t, "z2jh-vectors.json", &file)
	for _, c := range file.Cases {
		for _, sp := range c.Spawns {
			if c.Name != set || sp.User.Name != user {
				continue
			}
			k := sp.server(t, fmt.Sprintf("z2jh vector %s, %s", set, user))
			if k.state["namespace"] != "jhub" || k.pod.Spec.SchedulerName == "" {
				t.Fatalf("z2jh vector %s, %s: state %v, scheduler %q; want the release's namespace and user scheduler", set, user, k.state, k.pod.Spec.SchedulerName)
			}
			k.pod.Spec.SchedulerName = ""
			k.state["namespace"] = namespace
			k.state["dns_name"] = k.pod.Name + "." + namespace + ".svc.cluster.local"
			return k
		}
	}
	t.Fatalf("no spawn of %q in z2jh vector %q", user, set)
	return nil
}

// readVectors decodes the reference vectors spawner/testdata/name into v.
func readVectors(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "spawner", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// create makes the server's claim and pod in the test's namespace (the
// vectors' too) and waits until the pod runs. The claim gets the
// simulated cluster's storage class in place of the vector's
// (standard-rwo, which is not here) and no selector, so that it is bound
// and the pod scheduled, as KubeSpawner's were on their cluster.
func (k *kubeSpawnerServer) create(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	if k.claim != nil {
		k.claim.Namespace = namespace
		k.claim.Spec.StorageClassName, k.claim.Spec.Selector = ptr.To(testcluster.StorageClass), nil
		delete(k.claim.Annotations, "volume.beta.kubernetes.io/storage-class")
		claim, err := c.Client.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, k.claim, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: creating KubeSpawner's claim: %v", k, err)
		}
		k.claim = claim
	}
	k.pod.Namespace = namespace
	if _, err := c.Client.CoreV1().Pods(namespace).Create(ctx, k.pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s: creating KubeSpawner's pod: %v", k, err)
	}
	pod, err := c.WaitForPod(ctx, namespace, k.pod.Name, func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		t.Fatalf("%s: KubeSpawner's pod %s does not run: %v", k, k.pod.Name, err)
	}
	k.pod = pod
}

// delete removes what is left of the server's objects: its pods,
// KubeSpawner's or spawnkit's, and KubeSpawner's claim.
func (k *kubeSpawnerServer) delete(t *testing.T, c *testcluster.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	for _, p := range list.Items {
		if p.Annotations[naming.AnnotationUsername] == k.user && p.Annotations[naming.AnnotationServername] == k.server {
			if err := c.Client.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting pod %s: %v", p.Name, err)
			}
			waitPodGone(t, c, &p)
		}
	}
	if k.claim != nil {
		if err := c.Client.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, k.claim.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting claim %s: %v", k.claim.Name, err)
		}
	}
}

// waitPodGone waits until pod (that UID) is deleted.
func waitPodGone(t *testing.T, c *testcluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	testutil.EventuallyEvery(t, 100*time.Millisecond, 60*time.Second, "pod "+pod.Name+" gone", func() error {
		got, err := c.Client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && got.UID != pod.UID) {
			return nil
		}
		return fmt.Errorf("pod %s (UID %s) is still there (%v)", pod.Name, pod.UID, err)
	})
}

// recordRunningScript writes servers into JupyterHub's database as
// JupyterHub 3.0 records a running server of a KubeSpawner hub: the
// user's orm.Spawner row, its state what KubeSpawner's get_state
// returned, and an orm.Server with the address KubeSpawner's start()
// returned (the pod's IP and port) and the server's prefix (user.spawn).
// The server's API token and OAuth client, which the spawn also makes,
// are not: the simulated servers never call the hub.
const recordRunningScript = `import json
import sys
from datetime import datetime

from jupyterhub import orm

db = orm.new_session_factory(sys.argv[1])()
with open(sys.argv[2]) as f:
    servers = json.load(f)
for s in servers:
    user = orm.User.find(db, s["user"])
    if user is None:
        sys.exit("no user %r in JupyterHub's database" % s["user"])
    spawner = user.orm_spawners.get(s["server"])
    if spawner is None:
        spawner = orm.Spawner(name=s["server"], user=user)
        db.add(spawner)
    now = datetime.utcnow()
    spawner.server = orm.Server(proto="http", ip=s["ip"], port=s["port"], base_url=s["base_url"])
    spawner.state = s["state"]
    spawner.user_options = {}
    spawner.started = now
    spawner.last_activity = now
db.commit()
`

// recordRunning runs recordRunningScript with Debian's JupyterHub
// (the hub's own ORM) on the stack's database; JupyterHub must be
// stopped.
func (s *stack) recordRunning(ctx context.Context, t *testing.T, servers []*kubeSpawnerServer) {
	t.Helper()
	type row struct {
		User    string         `json:"user"`
		Server  string         `json:"server"`
		State   map[string]any `json:"state"`
		IP      string         `json:"ip"`
		Port    int32          `json:"port"`
		BaseURL string         `json:"base_url"`
	}
	var rows []row
	for _, ks := range servers {
		port := int32(0)
		for _, p := range ks.pod.Spec.Containers[0].Ports {
			if p.Name == "notebook-port" {
				port = p.ContainerPort
			}
		}
		rows = append(rows, row{User: ks.user, Server: ks.server, State: ks.state, IP: ks.pod.Status.PodIP, Port: port, BaseURL: userURL(ks.user, ks.server)})
	}
	data, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	script, input := filepath.Join(s.dir, "record_running.py"), filepath.Join(s.dir, "kubespawner-servers.json")
	writeFile(t, script, recordRunningScript)
	writeFile(t, input, string(data))
	cmd := exec.CommandContext(ctx, s.tools.python, script, "sqlite:///"+filepath.Join(s.dir, "jupyterhub.sqlite"), input)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("recording KubeSpawner's servers in JupyterHub's database: %v\n%s", err, out)
	}
}

// hubStateScript prints, as JSON, the state JupyterHub's database holds
// for a user's server (orm.Spawner.state, a JSON text column; null when
// none). It opens the database read-only, beside the running hub.
const hubStateScript = `import sqlite3
import sys

db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
row = db.execute(
    "SELECT spawners.state FROM spawners JOIN users ON spawners.user_id = users.id"
    " WHERE users.name = ? AND spawners.name = ?",
    (sys.argv[2], sys.argv[3]),
).fetchone()
if row is None:
    sys.exit("no server %r of user %r in JupyterHub's database" % (sys.argv[3], sys.argv[2]))
print(row[0] or "null")
`

// hubDBState is the state JupyterHub's database holds for a user's
// server: what a Spawner's load_state is given when the hub starts, the
// state KubeSpawner would load if the hub were switched back to it.
// JupyterHub 3.0 writes it when a server's start returns and when it
// stops, not on a poll.
func (s *stack) hubDBState(ctx context.Context, t *testing.T, user, server string) map[string]any {
	t.Helper()
	script := filepath.Join(s.dir, "hub_state.py")
	writeFile(t, script, hubStateScript)
	out, err := exec.CommandContext(ctx, s.tools.python, script, filepath.Join(s.dir, "jupyterhub.sqlite"), user, server).Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("reading the state of %s:%s in JupyterHub's database: %v\n%s", user, server, err, stderr)
	}
	var st map[string]any
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("the state of %s:%s in JupyterHub's database: %v: %s", user, server, err, out)
	}
	return st
}

// kubeSpawnerLooksAt is where KubeSpawner 7 looks for a server's pod
// once the hub runs it again (kubespawner/spawner.py at the vectors'
// commit 4161d544, the same in 7.0.0): load_state takes pod_name and
// namespace from the hub's state when it has them, else its
// pod_name_template's rendering and its namespace stay (podName, ns);
// poll then reads that namespace/name among the pods its reflector
// watches, those labelled component=singleuser-server.
func kubeSpawnerLooksAt(state map[string]any, ns, podName string) (string, string) {
	if v, ok := state["namespace"].(string); ok {
		ns = v
	}
	if v, ok := state["pod_name"].(string); ok {
		podName = v
	}
	return ns, podName
}
