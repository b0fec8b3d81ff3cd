package jupyterhub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

const (
	// z2jhVectors are Zero to JupyterHub 4.4's hub configurations, each
	// with the pods the real KubeSpawner 7.1 made from it.
	z2jhVectors = "../../spawner/testdata/z2jh-vectors.json"
	// z2jhNamespace is the namespace of the vectors' Helm release, which
	// their hub configurations set as c.KubeSpawner.namespace. The test
	// creates it in the simulated cluster, so that option is kept as it
	// is and the pods are the vectors' to the namespace.
	z2jhNamespace = "jhub"
	// z2jhUserScheduler is the scheduler_name z2jh sets while
	// scheduling.userScheduler.enabled (its default): the name of the
	// scheduler profile of the chart's user-scheduler Deployment.
	z2jhUserScheduler = "jhub-user-scheduler"
	// z2jhPriorityClass is the priority_class_name z2jh sets with
	// scheduling.podPriority.enabled: a PriorityClass the chart creates.
	z2jhPriorityClass = "jhub-default-priority"
	// z2jhHubOnly is set in the hub's environment only: no pod may get it.
	z2jhHubOnly = "SPAWNKIT_TEST_HUB_ONLY"
	// z2jhHubURL is the hub's address in the vectors (z2jh's Service
	// "hub"); the pods of the test's hub get its 127.0.0.1 address.
	z2jhHubURL = "http://hub:8081/"
)

// z2jhServiceConfig is the service's -config: the operator's base, which
// the hub's configuration is set over. Nearly empty, as docs/z2jh.md runs
// the service (no -config at all): there its namespace is the hub pod's,
// detected in-cluster; outside a cluster it must be named.
const z2jhServiceConfig = `# The hub pod's namespace, which the service detects in-cluster.
namespace: jhub
`

// z2jhHubPolicy is the service's -hub-policy: what docs/z2jh.md allows,
// the one privileged container z2jh's default values put on every pod.
const z2jhHubPolicy = `# singleuser.cloudMetadata.blockWithIptables (true by default): the
# block-cloud-metadata init container is privileged and adds NET_ADMIN.
privileged_images:
  - "quay.io/jupyterhub/k8s-network-tools:*"
`

// z2jhValueSet is a value set of the vector file the test runs, with the
// spawns of it it starts (by index).
type z2jhValueSet struct {
	name   string
	spawns []int
	// change, when set, is the configuration change the value set
	// goes through across a hub restart.
	change *z2jhChange
}

// z2jhChange is one option changed across a hub restart: spawn restarts
// under the new value; the value set's other servers run on.
type z2jhChange struct {
	spawn int
	image string
}

// TestJupyterHubZ2JH runs the real JupyterHub (Debian's 3.0) with
// Zero to JupyterHub's own hub configuration: for each of several value
// sets of spawner/testdata/z2jh-vectors.json, its jupyterhub_config.py
// sets the c.KubeSpawner and c.Spawner sections z2jh 4.4's
// jupyterhub_config.py made of the chart values (Kubernetes model values
// built as z2jh builds them, kubernetes.client.V1Container objects), the
// harness's own hub settings kept. SpawnkitSpawner sends them with each
// start; the service, with a nearly empty -config and the -hub-policy
// docs/z2jh.md gives, builds the pods from them. Users are started through
// JupyterHub's REST API, and for each:
//
//   - the pod in the cluster is the pod KubeSpawner 7.1 made for that
//     user and user options (the vector's expected pod), under the config
//     vectors' rules (spawner/configrules_test.go: spawnkit-identity and
//     secret-env apply here) and with the API server's defaults applied
//     to both (a dry run of the expected pod), so every field of the spec
//     is compared, and its labels and annotations; so is the claim;
//   - the hub's PATH and a variable set in the hub's environment alone
//     reach no container;
//   - the API token JupyterHub issued (read from the pod's env Secret and
//     checked against JupyterHub's API) appears nowhere in the pod;
//   - the server answers through the proxy.
//
// Value sets run one after another, each with a hub of its own (one
// JupyterHub has one c.KubeSpawner), all in the namespace jhub. One of
// them then changes c.KubeSpawner.image and restarts JupyterHub: the
// running servers keep their pods (same UID, old image), and a server
// stopped and started through JupyterHub gets the new image.
//
// The simulated cluster stands in for what the chart installs beside the
// hub: the namespace jhub, z2jh's user scheduler (a kube-scheduler whose
// only profile is jhub-user-scheduler, as the chart's user-scheduler
// Deployment runs it: the cluster's own scheduler leaves pods naming
// another scheduler Pending, and kwok binds nothing itself) and the
// PriorityClass jhub-default-priority (without it the API server refuses
// the pod). And for the value set with a GPU profile, a node as GKE
// makes one with a GPU: its accelerator label, an nvidia.com/gpu
// capacity and the nvidia.com/gpu taint, which keeps every other pod
// off it.
//
// What the test's hub does not take from the vectors, and why:
//
//   - no c.KubeSpawner option is overridden: c.KubeSpawner.namespace
//     stays jhub, which the test creates; the harness's
//     c.Spawner.start_timeout (20) gives way to the vectors'
//     c.KubeSpawner.start_timeout (300), as it would in any hub;
//   - the c.JupyterHub section is the harness's (the test's addresses,
//     tokens, proxy, authenticator, spawner_class spawnkit). It reaches
//     the pods only through JupyterHub's environment: JUPYTERHUB_API_URL
//     and JUPYTERHUB_ACTIVITY_URL name the test's hub instead of
//     http://hub:8081, and the expected pod is changed so;
//   - JUPYTERHUB_CLIENT_ID is JupyterHub 3.0's, which quotes the user's
//     name (jupyterhub-user-Bob.Smith%40Example.COM), where the vectors'
//     spawns were given an unquoted one as a fixed input.
func TestJupyterHubZ2JH(t *testing.T) {
	tl := requireTools(t)
	c := testcluster.Require(t, cluster)
	cases := readZ2JHVectors(t)
	setUpZ2JHCluster(t, c)
	// In the environment of every process the stack starts, JupyterHub's
	// among them.
	t.Setenv(z2jhHubOnly, "1")
	sets := []z2jhValueSet{
		// Dynamic storage (claim-{user_server}) and profiles: the default
		// profile, a profile_options choice with its own extra_labels,
		// an unlisted choice, and the GPU profile (extra resources, a
		// node selector and a toleration), which runs on the GPU node.
		// Not spawn 1: alice again, choosing the default profile by name
		// (the same pod as spawn 0's).
		{name: "profile_list_three", spawns: []int{0, 2, 3, 4}},
		// No user scheduler; the pods' PriorityClass. Here and below
		// spawn 1 is Bob.Smith@Example.COM, whose name KubeSpawner
		// escapes into the pod's and claim's names and labels.
		{name: "scheduler_off_priority_on", spawns: []int{0, 1}},
		// A plain init container before z2jh's V1Container, and a sidecar.
		{name: "init_and_extra_containers", spawns: []int{0, 1}},
		{name: "lifecycle_hooks", spawns: []int{0, 1},
			change: &z2jhChange{spawn: 0, image: "quay.io/jupyterhub/k8s-singleuser-sample:4.4.1"}},
	}
	for _, vs := range sets {
		vc, ok := cases[vs.name]
		if !ok {
			t.Fatalf("%s has no value set %s", z2jhVectors, vs.name)
		}
		t.Run(vs.name, func(t *testing.T) { testZ2JHValueSet(t, tl, c, vc, vs) })
	}
}

// z2jhCase is a value set of the vector file.
type z2jhCase struct {
	Name      string                     `json:"name"`
	HubConfig map[string]json.RawMessage `json:"hub_config"`
	Spawns    []z2jhSpawn                `json:"spawns"`
}

type z2jhSpawn struct {
	User struct {
		Name string `json:"name"`
		ID   int64  `json:"id"`
	} `json:"user"`
	ServerName    string         `json:"server_name"`
	UserOptions   map[string]any `json:"user_options"`
	OAuthClientID string         `json:"oauth_client_id"`
	Expected      struct {
		Pod json.RawMessage `json:"pod"`
		PVC json.RawMessage `json:"pvc"`
	} `json:"expected"`
}

func readZ2JHVectors(t *testing.T) map[string]*z2jhCase {
	t.Helper()
	data, err := os.ReadFile(z2jhVectors)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []*z2jhCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("decoding %s: %v", z2jhVectors, err)
	}
	out := map[string]*z2jhCase{}
	for _, c := range file.Cases {
		out[c.Name] = c
	}
	return out
}

// setUpZ2JHCluster gives the simulated cluster what the z2jh chart
// installs beside the hub, each removed when the test ends.
func setUpZ2JHCluster(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	ctx := t.Context()
	// Kept, empty, when the test ends (a namespace takes a while to
	// terminate, and a later run in the same cluster creates it again).
	createNamespace(t, c, z2jhNamespace)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		deleteZ2JHObjects(ctx, t, c)
	})
	// z2jh's templates/scheduling/priorityclass.yaml: the user pods'
	// PriorityClass, of scheduling.podPriority.defaultPriority (0).
	pc := &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: z2jhPriorityClass},
		Value:       0,
		Description: "z2jh's default priority of user pods (TestJupyterHubZ2JH)",
	}
	if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), z2jhPriorityClass, metav1.DeleteOptions{})
	})
	startZ2JHUserScheduler(t, c)
	addZ2JHGPUNode(t, c)
}

// z2jhGPUNode is the GPU node's name.
const z2jhGPUNode = "z2jh-gpu-node"

// addZ2JHGPUNode adds a simulated node as GKE makes one with an NVIDIA
// T4 (what profile_list_three's GPU profile selects and tolerates) and
// waits until it takes pods.
func addZ2JHGPUNode(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	ctx := t.Context()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("4Ti"),
		corev1.ResourcePods:   resource.MustParse("10000"),
		"nvidia.com/gpu":      resource.MustParse("4"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: z2jhGPUNode,
			// What the cluster's kwok manages (testcluster's
			// kwokNodeAnnotation), as it manages the cluster's own nodes.
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{
				corev1.LabelHostname:               z2jhGPUNode,
				corev1.LabelOSStable:               "linux",
				corev1.LabelArchStable:             "amd64",
				"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
			},
		},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), z2jhGPUNode, metav1.DeleteOptions{})
	})
	testutil.EventuallyEvery(t, 200*time.Millisecond, 60*time.Second, "node "+z2jhGPUNode+" without the not-ready taints", func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, z2jhGPUNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
				return fmt.Errorf("node %s still has taint %s", z2jhGPUNode, taint.Key)
			}
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s is not Ready: %+v", z2jhGPUNode, n.Status.Conditions)
	})
}

// startZ2JHUserScheduler runs z2jh's user scheduler: the cluster's
// kube-scheduler binary with the profile z2jh 4.4's user-scheduler
// ConfigMap renders from values.yaml (scheduling.userScheduler.plugins
// and pluginConfig: one profile, jhub-user-scheduler, packing users onto
// the fullest nodes), without leader election (one replica).
func startZ2JHUserScheduler(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	bin := filepath.Join(testBinDir(t), "kube-scheduler")
	dir := t.TempDir()
	config := filepath.Join(dir, "user-scheduler.yaml")
	writeFile(t, config, fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: %s
    plugins:
      score:
        disabled:
          - name: NodeResourcesBalancedAllocation
          - name: NodeAffinity
          - name: InterPodAffinity
          - name: NodeResourcesFit
          - name: ImageLocality
        enabled:
          - name: NodeAffinity
            weight: 14631
          - name: InterPodAffinity
            weight: 1331
          - name: NodeResourcesFit
            weight: 121
          - name: ImageLocality
            weight: 11
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources:
              - name: cpu
                weight: 1
              - name: memory
                weight: 1
`, c.Kubeconfig, z2jhUserScheduler))
	log := filepath.Join(dir, "user-scheduler.log")
	p, err := startProcess("user-scheduler", dir, log, nil, bin,
		"--config", config, "--secure-port=0",
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig, "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- user-scheduler.log (last 40 lines) ---\n%s", logTail(log, 40))
		}
		if err := p.stop(15 * time.Second); err != nil {
			t.Error(err)
		}
	})
	// Its configuration accepted and its Run begun, as the line it logs
	// then says; the servers' starts wait for it to schedule them.
	testutil.EventuallyEvery(t, 50*time.Millisecond, 30*time.Second, "the user scheduler to start", func() error {
		if done, err := p.exited(); done {
			t.Fatalf("the user scheduler exited: %v\n%s", err, logTail(log, 30))
		}
		if !logContains(log, "Starting Kubernetes Scheduler") {
			return errors.New(`its log has no "Starting Kubernetes Scheduler" yet`)
		}
		return nil
	})
}

// testBinDir is where the cluster's binaries are, as testcluster picks
// it: $SPAWNKIT_TESTBIN, else $KUBEBUILDER_ASSETS, else the default.
func testBinDir(t *testing.T) string {
	t.Helper()
	for _, env := range []string{"SPAWNKIT_TESTBIN", "KUBEBUILDER_ASSETS"} {
		if dir := os.Getenv(env); dir != "" {
			return dir
		}
	}
	dir, err := testcluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// deleteZ2JHObjects deletes every pod and claim in jhub and waits until
// the pods are gone.
func deleteZ2JHObjects(ctx context.Context, t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(z2jhNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Errorf("deleting the pods in %s: %v", z2jhNamespace, err)
	}
	if err := c.Client.CoreV1().PersistentVolumeClaims(z2jhNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Errorf("deleting the claims in %s: %v", z2jhNamespace, err)
	}
	// Each pod listed is watched until it is gone; then the list again.
	for {
		list, err := c.Client.CoreV1().Pods(z2jhNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("pods left in %s: listing them: %v", z2jhNamespace, err)
			return
		}
		if len(list.Items) == 0 {
			return
		}
		p := list.Items[0]
		if _, err := c.WaitForPod(ctx, z2jhNamespace, p.Name, goneOrReplaced(p.UID)); err != nil {
			t.Errorf("pods left in %s: %v", z2jhNamespace, err)
			return
		}
	}
}

// z2jhServer is a server the test started, with what it expects of it.
type z2jhServer struct {
	user  string
	spawn z2jhSpawn
	pod   corev1.Pod
}

func testZ2JHValueSet(t *testing.T, tl tools, c *testcluster.Cluster, vc *z2jhCase, vs z2jhValueSet) {
	ctx := t.Context()
	begin := time.Now()
	dir := t.TempDir()
	serviceConfig, policy := filepath.Join(dir, "spawner-service.yaml"), filepath.Join(dir, "hub-policy.yaml")
	writeFile(t, serviceConfig, z2jhServiceConfig)
	writeFile(t, policy, z2jhHubPolicy)
	hubConfig := z2jhHubConfig(t, vc)
	s := newStack(t, tl, c, stackOptions{hubConfig: hubConfig, serviceConfig: serviceConfig, hubPolicy: policy})
	// Runs before the stack stops: nothing of this value set is left
	// for the next one, whatever happened.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		deleteZ2JHObjects(ctx, t, c)
	})
	t.Logf("stack up in %s", time.Since(begin).Round(time.Millisecond))

	var servers []*z2jhServer
	spawns := slices.Clone(vs.spawns)
	// In the order of the vectors' user ids: JupyterHub numbers its
	// users as it creates them.
	sort.SliceStable(spawns, func(i, j int) bool { return vc.Spawns[spawns[i]].User.ID < vc.Spawns[spawns[j]].User.ID })
	for _, i := range spawns {
		sp := vc.Spawns[i]
		if sp.ServerName != "" {
			t.Fatalf("spawn %d is of named server %q: the test starts default servers", i, sp.ServerName)
		}
		s.createUser(ctx, t, sp.User.Name)
		servers = append(servers, &z2jhServer{user: sp.User.Name, spawn: sp})
	}
	// The pods KubeSpawner made, with the API server's defaults: made
	// before any of the test's pods exists.
	wantPods := map[string]*corev1.Pod{}
	wantPVCs := map[string]*corev1.PersistentVolumeClaim{}
	for _, sv := range servers {
		wantPods[sv.user] = expectedZ2JHPod(ctx, t, c, s, sv.spawn, "")
		wantPVCs[sv.user] = expectedZ2JHClaim(ctx, t, c, sv.spawn.Expected.PVC)
	}
	began := time.Now()
	for _, sv := range servers {
		uo := sv.spawn.UserOptions
		if uo == nil {
			uo = map[string]any{}
		}
		s.startServer(ctx, t, sv.user, "", uo)
	}
	for _, sv := range servers {
		s.waitServer(ctx, t, sv.user, "", 90*time.Second, "ready", ready)
		sv.pod = z2jhPod(ctx, t, c, sv.user)
	}
	t.Logf("%d servers ready in %s", len(servers), time.Since(began).Round(time.Millisecond))
	for _, sv := range servers {
		t.Run(sv.user, func(t *testing.T) {
			// The GPU node takes the GPU profile's pod, and no other.
			if gpu := sv.pod.Spec.NodeSelector["cloud.google.com/gke-accelerator"] != ""; gpu != (sv.pod.Spec.NodeName == z2jhGPUNode) {
				t.Errorf("pod %s is on node %s (node selector %v)", sv.pod.Name, sv.pod.Spec.NodeName, sv.pod.Spec.NodeSelector)
			}
			checkZ2JHPod(t, sv.pod, wantPods[sv.user])
			checkZ2JHClaim(ctx, t, c, sv.pod, wantPVCs[sv.user])
			checkZ2JHHubEnvKept(t, sv.pod)
			checkZ2JHToken(ctx, t, s, c, sv.user, sv.pod)
			checkZ2JHProxy(ctx, t, s, sv.user, sv.pod)
		})
	}
	if vs.change != nil && !t.Failed() {
		testZ2JHChange(t, s, c, vc, servers, *vs.change)
	}
	for _, sv := range servers {
		s.mustAPI(ctx, t, http.MethodDelete, serverPath(sv.user, ""), nil, http.StatusNoContent, http.StatusAccepted)
	}
	for _, sv := range servers {
		s.waitServer(ctx, t, sv.user, "", 60*time.Second, "stopped", gone)
		waitNoZ2JHPod(t, c, sv.user)
	}
	t.Logf("value set %s: %d servers started, checked and stopped in %s", vs.name, len(servers), time.Since(begin).Round(time.Millisecond))
}

// testZ2JHChange changes c.KubeSpawner.image and restarts JupyterHub:
// every running server keeps its pod, old image and all; the changed
// server, stopped and started through JupyterHub, gets a pod with the new
// image, otherwise the vector's.
func testZ2JHChange(t *testing.T, s *stack, c *testcluster.Cluster, vc *z2jhCase, servers []*z2jhServer, ch z2jhChange) {
	ctx := t.Context()
	begin := time.Now()
	var changed *z2jhServer
	for _, sv := range servers {
		if sv.user == vc.Spawns[ch.spawn].User.Name {
			changed = sv
		}
	}
	if changed == nil {
		t.Fatalf("the change's spawn %d was not started", ch.spawn)
	}
	s.opts.hubConfig = z2jhHubConfig(t, vc) + fmt.Sprintf(`
# The operator's change (TestJupyterHubZ2JH): the image, for servers
# started from now on.
c.KubeSpawner.image = %q
`, ch.image)
	writeFile(t, filepath.Join(s.dir, "jupyterhub_config.py"), s.hubConfig(t))
	s.restartHub(ctx, t)
	waitZ2JHPolls(t, s, servers, 3)
	hubLog := s.logPath("jupyterhub")
	for _, sv := range servers {
		if !logContains(hubLog, "] "+sv.user+" still running") {
			t.Errorf("JupyterHub's log does not say %q after its restart", sv.user+" still running")
		}
		if logContains(hubLog, "User "+sv.user+" server stopped") || logContains(hubLog, sv.user+" appears to have stopped") {
			t.Errorf("JupyterHub's log says %s's server stopped", sv.user)
		}
		s.waitServer(ctx, t, sv.user, "", 30*time.Second, "ready after the restart", ready)
		p := z2jhPod(ctx, t, c, sv.user)
		if p.UID != sv.pod.UID {
			t.Errorf("after JupyterHub's restart under the new image, %s's pod is %s (UID %s), was UID %s", sv.user, p.Name, p.UID, sv.pod.UID)
		}
		if got, was := p.Spec.Containers[0].Image, sv.pod.Spec.Containers[0].Image; got != was {
			t.Errorf("after JupyterHub's restart, %s's running pod has image %s, was %s", sv.user, got, was)
		}
		checkZ2JHProxy(ctx, t, s, sv.user, p)
	}
	t.Logf("JupyterHub restarted under the new image: %d servers kept their pods, in %s", len(servers), time.Since(begin).Round(time.Millisecond))
	begin = time.Now()

	u := changed.user
	s.mustAPI(ctx, t, http.MethodDelete, serverPath(u, ""), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, u, "", 60*time.Second, "stopped", gone)
	waitNoZ2JHPod(t, c, u)
	want := expectedZ2JHPod(ctx, t, c, s, changed.spawn, ch.image)
	uo := changed.spawn.UserOptions
	if uo == nil {
		uo = map[string]any{}
	}
	s.startServer(ctx, t, u, "", uo)
	s.waitServer(ctx, t, u, "", 90*time.Second, "ready under the new image", ready)
	p := z2jhPod(ctx, t, c, u)
	if got := p.Spec.Containers[0].Image; got != ch.image {
		t.Errorf("%s's pod after the stop and start has image %s, want the new %s", u, got, ch.image)
	}
	checkZ2JHPod(t, p, want)
	checkZ2JHHubEnvKept(t, p)
	checkZ2JHToken(ctx, t, s, c, u, p)
	checkZ2JHProxy(ctx, t, s, u, p)
	for _, sv := range servers {
		if sv == changed {
			continue
		}
		if p := z2jhPod(ctx, t, c, sv.user); p.UID != sv.pod.UID || p.Spec.Containers[0].Image != sv.pod.Spec.Containers[0].Image {
			t.Errorf("%s's pod changed with %s's start: %s (UID %s, image %s), was UID %s", sv.user, u, p.Name, p.UID, p.Spec.Containers[0].Image, sv.pod.UID)
		}
	}
	changed.pod = p
	t.Logf("%s stopped and started under the new image in %s", u, time.Since(begin).Round(time.Millisecond))
}

// waitZ2JHPolls waits until the service has answered n more status
// requests (JupyterHub's polls) for each server: stack.waitPolls, with
// the user's name in the request path as the Python Spawner quotes it
// (Bob.Smith%40Example.COM).
func waitZ2JHPolls(t *testing.T, s *stack, servers []*z2jhServer, n int) {
	t.Helper()
	answered := func(user string) int {
		return logCount(s.logPath("spawner-service"), `"msg"="request"`, `"method"="GET"`,
			`"path"="/v1/users/`+pyQuote(user)+`/server"`, `"status"=200`)
	}
	before := map[string]int{}
	for _, sv := range servers {
		before[sv.user] = answered(sv.user)
	}
	testutil.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, "the status polls of each server", func() error {
		for _, sv := range servers {
			if got := answered(sv.user) - before[sv.user]; got < n {
				return fmt.Errorf("the spawner-service answered %d status requests for %s, want %d", got, sv.user, n)
			}
		}
		return nil
	})
}

// z2jhHubConfig is the Python appended to the stack's
// jupyterhub_config.py: the value set's c.KubeSpawner and c.Spawner
// sections, each option assigned as z2jh's jupyterhub_config.py leaves it.
// The JupyterHub section stays the harness's (its addresses, token,
// proxy, authenticator and spawner_class are the test's).
func z2jhHubConfig(t *testing.T, vc *z2jhCase) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `
# z2jh value set %q (spawner/testdata/z2jh-vectors.json): the c.KubeSpawner
# and c.Spawner sections z2jh 4.4's jupyterhub_config.py made of the chart
# values. Kubernetes models are the client's own objects, as z2jh builds
# V1Container objects (Debian's python3-kubernetes).
import kubernetes.client

_k8s_client = kubernetes.client.ApiClient()


def _k8s_model(value, model):
    return _k8s_client._ApiClient__deserialize(value, model)

`, vc.Name)
	for _, section := range []string{"KubeSpawner", "Spawner"} {
		raw, ok := vc.HubConfig[section]
		if !ok {
			continue
		}
		for _, e := range orderedObject(t, raw) {
			v, err := pyValue(e.value)
			if err != nil {
				t.Fatalf("%s: c.%s.%s: %v", vc.Name, section, e.key, err)
			}
			fmt.Fprintf(&b, "c.%s.%s = %s\n", section, e.key, v)
		}
	}
	return b.String()
}

type jsonEntry struct {
	key   string
	value json.RawMessage
}

// orderedObject decodes a JSON object keeping its key order.
func orderedObject(t *testing.T, raw json.RawMessage) []jsonEntry {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %.100s", raw)
	}
	var out []jsonEntry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, jsonEntry{tok.(string), v})
	}
	return out
}

// pyValue renders a JSON value of the vector file as a Python
// expression: objects as dicts (key order kept), numbers as written,
// {"__k8s_model__": M, "value": V} as the client's M built from V.
func pyValue(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return pyFrom(dec)
}

func pyFrom(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '[':
			var items []string
			for dec.More() {
				item, err := pyFrom(dec)
				if err != nil {
					return "", err
				}
				items = append(items, item)
			}
			_, err := dec.Token()
			return "[" + strings.Join(items, ", ") + "]", err
		case '{':
			var keys, vals []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return "", err
				}
				val, err := pyFrom(dec)
				if err != nil {
					return "", err
				}
				keys, vals = append(keys, kt.(string)), append(vals, val)
			}
			if _, err := dec.Token(); err != nil {
				return "", err
			}
			if len(keys) == 2 && slices.Contains(keys, "__k8s_model__") && slices.Contains(keys, "value") {
				return fmt.Sprintf("_k8s_model(%s, %s)", vals[slices.Index(keys, "value")], vals[slices.Index(keys, "__k8s_model__")]), nil
			}
			items := make([]string, len(keys))
			for i, k := range keys {
				if k == "__callable__" || k == "__lazy_config_value__" {
					return "", fmt.Errorf("a %s value cannot be written as Python", k)
				}
				items[i] = pyString(k) + ": " + vals[i]
			}
			return "{" + strings.Join(items, ", ") + "}", nil
		}
		return "", fmt.Errorf("unexpected %v", v)
	case string:
		return pyString(v), nil
	case json.Number:
		return string(v), nil
	case bool:
		if v {
			return "True", nil
		}
		return "False", nil
	case nil:
		return "None", nil
	}
	return "", fmt.Errorf("unexpected token %v", tok)
}

// pyString is a Python string literal: JSON's escapes are Python's.
func pyString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// pyQuote is Python's urllib.parse.quote(s): every byte but letters,
// digits, "_.-~" and "/" percent-encoded.
func pyQuote(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("_.-~/", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// z2jhPod returns the user's only pod in jhub, or fails the test.
func z2jhPod(ctx context.Context, t *testing.T, c *testcluster.Cluster, user string) corev1.Pod {
	t.Helper()
	pods := z2jhPods(ctx, t, c, user)
	if len(pods) != 1 {
		t.Fatalf("%s has %d pods in %s, want 1", user, len(pods), z2jhNamespace)
	}
	return pods[0]
}

// z2jhPods are a user's pods in jhub, by KubeSpawner's owner annotation.
func z2jhPods(ctx context.Context, t *testing.T, c *testcluster.Cluster, user string) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(z2jhNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Annotations[naming.AnnotationUsername] == user && p.Annotations[naming.AnnotationServername] == "" {
			out = append(out, p)
		}
	}
	return out
}

func waitNoZ2JHPod(t *testing.T, c *testcluster.Cluster, user string) {
	t.Helper()
	testutil.EventuallyEvery(t, 100*time.Millisecond, 30*time.Second, user+"'s pods gone", func() error {
		if pods := z2jhPods(t.Context(), t, c, user); len(pods) > 0 {
			return fmt.Errorf("%s still has pod %s", user, pods[0].Name)
		}
		return nil
	})
}

// expectedZ2JHPod is the vector's pod as the cluster would hold it: the
// config vectors' rules applied, the hub's address the test's, image
// (when set) the changed one, and the API server's defaults and admission
// applied by a dry run.
func expectedZ2JHPod(ctx context.Context, t *testing.T, c *testcluster.Cluster, s *stack, sp z2jhSpawn, image string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	if err := json.Unmarshal(sp.Expected.Pod, pod); err != nil {
		t.Fatalf("the vector's pod: %v", err)
	}
	// Rule spawnkit-identity: spawnkit's managed-by label; the version
	// and state annotations are left out on both sides.
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[naming.LabelManagedBy] = naming.ManagedBySpawnkit
	dropSpawnkitAnnotations(pod.Annotations)
	// Rule secret-env: the API token (secret_env's default variables,
	// which no value set here changes) is read from the pod's Secret.
	env := pod.Spec.Containers[0].Env
	for i := range env {
		if env[i].ValueFrom == nil && env[i].Value != "" && slices.Contains(kubespawner.DefaultSecretEnv, env[i].Name) {
			env[i].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: spawner.EnvSecretName(pod.Name)}, Key: env[i].Name}}
			env[i].Value = ""
		}
	}
	// The test's hub is at another address than z2jh's Service "hub":
	// JUPYTERHUB_API_URL and JUPYTERHUB_ACTIVITY_URL name it.
	hub := fmt.Sprintf("http://127.0.0.1:%d/", s.hubAPI)
	// The vectors' spawns were given oauth_client_id as a fixed input,
	// "jupyterhub-user-" and the name as it is; JupyterHub 3.0 makes it
	// with the name quoted (User.spawn: quote(self.name)), so
	// Bob.Smith@Example.COM's is jupyterhub-user-Bob.Smith%40Example.COM.
	// JUPYTERHUB_CLIENT_ID is JupyterHub's, passed through.
	clientID := "jupyterhub-user-" + pyQuote(sp.User.Name)
	for i := range env {
		env[i].Value = strings.Replace(env[i].Value, z2jhHubURL, hub, 1)
		if env[i].Name == "JUPYTERHUB_CLIENT_ID" && env[i].Value == sp.OAuthClientID {
			env[i].Value = clientID
		}
	}
	if image != "" {
		// The change: the image, and the variables KubeSpawner derives
		// from it.
		pod.Spec.Containers[0].Image = image
		for i := range env {
			if env[i].Name == "JUPYTER_IMAGE" || env[i].Name == "JUPYTER_IMAGE_SPEC" {
				env[i].Value = image
			}
		}
	}
	pod.TypeMeta = metav1.TypeMeta{}
	// KubeSpawner passes the namespace to the API call.
	pod.Namespace = z2jhNamespace
	name := pod.Name
	pod.Name += "-expected"
	got, err := c.Client.CoreV1().Pods(z2jhNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry run of the vector's pod %s: %v", name, err)
	}
	got.Name = name
	return got
}

// expectedZ2JHClaim is the vector's claim as the cluster would hold it
// (nil without one).
func expectedZ2JHClaim(ctx context.Context, t *testing.T, c *testcluster.Cluster, raw json.RawMessage) *corev1.PersistentVolumeClaim {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := json.Unmarshal(raw, pvc); err != nil {
		t.Fatalf("the vector's claim: %v", err)
	}
	if pvc.Labels == nil {
		pvc.Labels = map[string]string{}
	}
	pvc.Labels[naming.LabelManagedBy] = naming.ManagedBySpawnkit
	dropSpawnkitAnnotations(pvc.Annotations)
	pvc.TypeMeta = metav1.TypeMeta{}
	pvc.Namespace = z2jhNamespace
	name := pvc.Name
	pvc.Name += "-expected"
	got, err := c.Client.CoreV1().PersistentVolumeClaims(z2jhNamespace).Create(ctx, pvc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry run of the vector's claim %s: %v", name, err)
	}
	got.Name = name
	return got
}

// dropSpawnkitAnnotations removes what rule spawnkit-identity leaves out
// of the comparison: KubeSpawner's version, spawnkit's state and start.
func dropSpawnkitAnnotations(a map[string]string) {
	delete(a, "hub.jupyter.org/kubespawner-version")
	delete(a, naming.AnnotationState)
	delete(a, naming.AnnotationStartID)
}

// checkZ2JHPod compares what the spawner decides of a pod: its name,
// namespace, labels, annotations, owners and whole spec, but the node the
// scheduler bound it to.
func checkZ2JHPod(t *testing.T, got corev1.Pod, want *corev1.Pod) {
	t.Helper()
	view := func(p *corev1.Pod) map[string]any {
		spec := p.Spec.DeepCopy()
		spec.NodeName = ""
		a := map[string]string{}
		for k, v := range p.Annotations {
			a[k] = v
		}
		dropSpawnkitAnnotations(a)
		return map[string]any{
			"metadata": map[string]any{"name": p.Name, "namespace": p.Namespace, "labels": p.Labels, "annotations": a, "ownerReferences": p.OwnerReferences},
			"spec":     spec,
		}
	}
	if diffs := jsonDiffs(view(&got), view(want)); len(diffs) > 0 {
		t.Errorf("pod %s differs from KubeSpawner's (%d fields):\n%s", got.Name, len(diffs), strings.Join(diffs, "\n"))
	}
}

// checkZ2JHClaim compares the pod's claim with the vector's: labels,
// annotations but those of the volume controllers, and spec but the
// volume it was bound to.
func checkZ2JHClaim(ctx context.Context, t *testing.T, c *testcluster.Cluster, pod corev1.Pod, want *corev1.PersistentVolumeClaim) {
	t.Helper()
	if want == nil {
		return
	}
	got, err := c.Client.CoreV1().PersistentVolumeClaims(z2jhNamespace).Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("pod %s's claim: %v", pod.Name, err)
		return
	}
	view := func(p *corev1.PersistentVolumeClaim) map[string]any {
		spec := p.Spec.DeepCopy()
		spec.VolumeName = ""
		a := map[string]string{}
		for k, v := range p.Annotations {
			if !strings.HasPrefix(k, "pv.kubernetes.io/") && !strings.HasPrefix(k, "volume.beta.kubernetes.io/") && !strings.HasPrefix(k, "volume.kubernetes.io/") {
				a[k] = v
			}
		}
		dropSpawnkitAnnotations(a)
		return map[string]any{"metadata": map[string]any{"name": p.Name, "labels": p.Labels, "annotations": a}, "spec": spec}
	}
	if diffs := jsonDiffs(view(got), view(want)); len(diffs) > 0 {
		t.Errorf("claim %s differs from KubeSpawner's (%d fields):\n%s", got.Name, len(diffs), strings.Join(diffs, "\n"))
	}
}

// checkZ2JHHubEnvKept: neither the hub's PATH nor a variable of the
// hub's environment alone reaches any container.
func checkZ2JHHubEnvKept(t *testing.T, pod corev1.Pod) {
	t.Helper()
	path := os.Getenv("PATH")
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.Name == "PATH" || e.Name == z2jhHubOnly || (path != "" && e.Value == path) {
					t.Errorf("pod %s container %s has the hub's %s=%q", pod.Name, c.Name, e.Name, e.Value)
				}
			}
		}
	}
	data, _ := json.Marshal(pod)
	if bytes.Contains(data, []byte(z2jhHubOnly)) {
		t.Errorf("pod %s holds %s", pod.Name, z2jhHubOnly)
	}
}

// checkZ2JHToken: the server's API token, which the pod's env Secret
// holds and JupyterHub takes as the user's, appears nowhere in the pod.
func checkZ2JHToken(ctx context.Context, t *testing.T, s *stack, c *testcluster.Cluster, user string, pod corev1.Pod) {
	t.Helper()
	sec, err := c.Client.CoreV1().Secrets(z2jhNamespace).Get(ctx, spawner.EnvSecretName(pod.Name), metav1.GetOptions{})
	if err != nil {
		t.Errorf("pod %s's env Secret: %v", pod.Name, err)
		return
	}
	token := string(sec.Data["JUPYTERHUB_API_TOKEN"])
	if len(token) < 16 || string(sec.Data["JPY_API_TOKEN"]) != token {
		t.Errorf("pod %s's env Secret holds JUPYTERHUB_API_TOKEN of %d bytes and JPY_API_TOKEN of %d, want the same token",
			pod.Name, len(token), len(sec.Data["JPY_API_TOKEN"]))
		return
	}
	s.noteSecrets(ctx, pod)
	// The token is the one JupyterHub issued for this user's server.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.hubURL()+"/hub/api/user", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var who struct {
		Name string `json:"name"`
	}
	err = json.NewDecoder(resp.Body).Decode(&who)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || who.Name != user {
		t.Errorf("JupyterHub's API with pod %s's token: %s, %q, %v; want user %s", pod.Name, resp.Status, who.Name, err, user)
	}
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(token)) {
		t.Errorf("pod %s holds the API token JupyterHub issued for %s", pod.Name, user)
	}
}

// checkZ2JHProxy: the server answers through the proxy, from its pod.
func checkZ2JHProxy(ctx context.Context, t *testing.T, s *stack, user string, pod corev1.Pod) {
	t.Helper()
	a, err := s.viaProxy(ctx, userURL(user, ""))
	if err != nil || a.Pod != pod.Name || a.Namespace != pod.Namespace {
		t.Errorf("%s through the proxy: %+v, %v; want an answer from %s/%s", userURL(user, ""), a, err, pod.Namespace, pod.Name)
	}
}

// jsonDiffs lists where got and want differ as JSON: one line per path.
func jsonDiffs(got, want any) []string {
	var g, w any
	for _, p := range []struct {
		in  any
		out *any
	}{{got, &g}, {want, &w}} {
		data, err := json.Marshal(p.in)
		if err != nil {
			return []string{err.Error()}
		}
		if err := json.Unmarshal(data, p.out); err != nil {
			return []string{err.Error()}
		}
	}
	var out []string
	diffJSON("", g, w, &out)
	return out
}

func diffJSON(path string, g, w any, out *[]string) {
	switch gv := g.(type) {
	case map[string]any:
		if wv, ok := w.(map[string]any); ok {
			keys := map[string]bool{}
			for k := range gv {
				keys[k] = true
			}
			for k := range wv {
				keys[k] = true
			}
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				diffJSON(path+"."+k, gv[k], wv[k], out)
			}
			return
		}
	case []any:
		if wv, ok := w.([]any); ok && len(wv) == len(gv) {
			for i := range gv {
				diffJSON(fmt.Sprintf("%s[%d]", path, i), gv[i], wv[i], out)
			}
			return
		}
	}
	gj, _ := json.Marshal(g)
	wj, _ := json.Marshal(w)
	if !bytes.Equal(gj, wj) {
		*out = append(*out, fmt.Sprintf("  %s: spawnkit %s, KubeSpawner %s", strings.TrimPrefix(path, "."), gj, wj))
	}
}
