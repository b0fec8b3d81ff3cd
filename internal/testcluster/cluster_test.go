package testcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	if os.Getenv("TESTCLUSTER_HELPER") == "1" {
		// The helper of TestKilledBinaryLeavesNoProcesses starts its own
		// cluster and is killed; it needs no package cluster.
		os.Exit(m.Run())
	}
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Progress: os.Stderr, Responders: true, Workloads: true}, &cluster)
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) string {
	t.Helper()
	c := testcluster.Require(t, cluster)
	ns, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "tc-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func testPod(name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "notebook", Image: "quay.io/jupyter/base-notebook:latest"}},
		},
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestAPIServerCRUDAndWatch(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)
	pods := c.Client.CoreV1().Pods(ns)

	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "crud").String()})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	created, err := pods.Create(ctx, testPod("crud", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	got, err := pods.Get(ctx, "crud", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.UID != created.UID {
		t.Errorf("get returned uid %s, create %s", got.UID, created.UID)
	}
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "crud" {
		t.Errorf("list = %d items, want the one pod", len(list.Items))
	}
	if err := pods.Delete(ctx, "crud", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := pods.Get(ctx, "crud", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: err = %v, want NotFound", err)
	}

	// The watch must have seen the pod added and, finally, deleted.
	var types []watch.EventType
	for ev := range w.ResultChan() {
		types = append(types, ev.Type)
		if ev.Type == watch.Deleted {
			break
		}
	}
	if len(types) < 2 || types[0] != watch.Added || types[len(types)-1] != watch.Deleted {
		t.Errorf("watch saw %v, want ADDED first and DELETED last", types)
	}
}

func TestPodBecomesRunning(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	start := time.Now()
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, testPod("runs", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	pod, err := c.WaitForPod(ctx, ns, "runs", func(p *corev1.Pod) (bool, error) {
		return p != nil && p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod create to Running and Ready: %s", time.Since(start).Round(time.Millisecond))
	if pod.Status.PodIP == "" || pod.Spec.NodeName == "" {
		t.Errorf("running pod has IP %q on node %q; want both set", pod.Status.PodIP, pod.Spec.NodeName)
	}
	if cs := pod.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil {
		t.Errorf("container statuses = %+v, want one running container", cs)
	}
	// The scheduler and kwok both record events for the pod.
	reasons := waitForEventReasons(t, ctx, ns, "runs", "Scheduled", "Started")
	t.Logf("events: %v", reasons)
}

// TestWorkloadsMakePods: with Options.Workloads (make cluster's default) a
// Deployment applied to the cluster gets its pods, scheduled and Running,
// as `kubectl apply -k deploy/` expects.
func TestWorkloadsMakePods(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       testPod("", nil).Spec,
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	testutil.EventuallyEvery(t, 200*time.Millisecond, 50*time.Second, "two web pods running", func() error {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && p.Status.PodIP != "" {
				running++
			}
		}
		if running != 2 {
			return fmt.Errorf("%d of the Deployment's pods are Running with a node and an IP (of %d), want 2", running, len(pods.Items))
		}
		return nil
	})
}

func TestImagePullFailure(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	pod := testPod("pull", map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorImagePullError})
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	var seen []string
	got, err := c.WaitForPod(ctx, ns, "pull", func(p *corev1.Pod) (bool, error) {
		if p == nil {
			return false, fmt.Errorf("pod deleted")
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil && !slices.Contains(seen, cs.State.Waiting.Reason) {
				seen = append(seen, cs.State.Waiting.Reason)
			}
			if cs.State.Waiting != nil && cs.State.Waiting.Reason == "ImagePullBackOff" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("phase = %s, want Pending", got.Status.Phase)
	}
	if !strings.Contains(got.Status.ContainerStatuses[0].State.Waiting.Message, pod.Spec.Containers[0].Image) {
		t.Errorf("back-off message %q does not name the image", got.Status.ContainerStatuses[0].State.Waiting.Message)
	}
	// ErrImagePull may pass between two watch events; the Warning event
	// proves it happened.
	t.Logf("waiting reasons seen: %v", seen)
	waitForEventReasons(t, ctx, ns, "pull", "Failed", "BackOff")
}

func TestContainerExitCode(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	for _, tc := range []struct {
		code  int32
		phase corev1.PodPhase
	}{{3, corev1.PodFailed}, {0, corev1.PodSucceeded}} {
		name := fmt.Sprintf("exit-%d", tc.code)
		pod := testPod(name, map[string]string{
			testcluster.BehaviorAnnotation:  testcluster.BehaviorExit,
			testcluster.ExitCodeAnnotation:  strconv.Itoa(int(tc.code)),
			testcluster.ExitAfterAnnotation: "500ms",
		})
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		wasRunning := false
		got, err := c.WaitForPod(ctx, ns, name, func(p *corev1.Pod) (bool, error) {
			if p == nil {
				return false, fmt.Errorf("pod deleted")
			}
			wasRunning = wasRunning || p.Status.Phase == corev1.PodRunning
			return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !wasRunning {
			t.Errorf("%s: never observed Running before it ended", name)
		}
		if got.Status.Phase != tc.phase {
			t.Errorf("%s: phase = %s, want %s", name, got.Status.Phase, tc.phase)
		}
		term := got.Status.ContainerStatuses[0].State.Terminated
		if term == nil || term.ExitCode != tc.code {
			t.Errorf("%s: terminated state = %+v, want exit code %d", name, term, tc.code)
		}
	}
}

func TestNeverReady(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	pod := testPod("unready", map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady})
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := c.WaitForPod(ctx, ns, "unready", testcluster.PodRunning); err != nil {
		t.Fatal(err)
	}
	// A ready pod would turn ready within the same stage pass; give the
	// simulated kubelet well over that time, then check it did not.
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	got, err := c.WaitForPod(waitCtx, ns, "unready", func(p *corev1.Pod) (bool, error) { return p != nil && podReady(p), nil })
	if err == nil {
		t.Fatalf("pod became ready: %+v", got.Status.Conditions)
	}
	if ctx.Err() != nil {
		t.Fatalf("test context ended: %v", ctx.Err())
	}
}

// A pod with ReadyAfterAnnotation waits Pending, with its IP, for that
// long before it runs and turns ready.
func TestReadyAfter(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	const after = 2 * time.Second
	created := time.Now()
	pod := testPod("pulls", map[string]string{testcluster.ReadyAfterAnnotation: after.String()})
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	pendingWithIP := false
	got, err := c.WaitForPod(ctx, ns, "pulls", func(p *corev1.Pod) (bool, error) {
		if p == nil {
			return false, fmt.Errorf("pod deleted")
		}
		pendingWithIP = pendingWithIP || p.Status.Phase == corev1.PodPending && p.Status.PodIP != ""
		return p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(created)
	t.Logf("create to Running and Ready with %s=%s: %s", testcluster.ReadyAfterAnnotation, after, took.Round(time.Millisecond))
	if took < after {
		t.Errorf("pod %s ready %s after it was created, before its %s", got.Name, took, after)
	}
	if !pendingWithIP {
		t.Errorf("pod %s was never seen Pending with its IP before it ran", got.Name)
	}
}

func TestOwnedSecretIsGarbageCollected(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)

	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, testPod("owner", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "owned",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			}},
		},
		StringData: map[string]string{"k": "v"},
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	// A graceful delete needs the simulated kubelet to finish it.
	if _, err := c.WaitForPod(ctx, ns, pod.Name, testcluster.PodGone); err != nil {
		t.Fatal(err)
	}
	secrets := c.Client.CoreV1().Secrets(ns)
	w, err := secrets.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "owned").String()})
	if err != nil {
		t.Fatalf("watch secret: %v", err)
	}
	defer w.Stop()
	if _, err := secrets.Get(ctx, "owned", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return // already collected
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			return
		}
	}
	t.Fatalf("secret owned by a deleted pod was not garbage-collected: %v", ctx.Err())
}

func TestNamespaceDeletionFinishes(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := ctxTimeout(t, 60*time.Second)
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tc-del-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if _, err := c.Client.CoreV1().Pods(ns.Name).Create(ctx, testPod("p", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if _, err := c.WaitForPod(ctx, ns.Name, "p", testcluster.PodRunning); err != nil {
		t.Fatal(err)
	}
	w, err := c.Client.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", ns.Name).String()})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			return
		}
	}
	t.Fatalf("namespace %s with a running pod never finished terminating: %v", ns.Name, ctx.Err())
}

// TestStopLeavesNoProcesses starts a second cluster and proves that Stop
// leaves none of its processes behind.
func TestStopLeavesNoProcesses(t *testing.T) {
	testcluster.Require(t, cluster)
	before := childPIDs(t)
	c, err := testcluster.Start(ctxTimeout(t, 2*time.Minute), testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	during := childPIDs(t)
	var started []int
	for _, pid := range during {
		if !slices.Contains(before, pid) {
			started = append(started, pid)
		}
	}
	// etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok.
	if len(started) != 5 {
		t.Errorf("cluster started %d child processes, want 5: %v", len(started), started)
	}
	// Both clusters took a default pod range; they must not share it.
	if c.PodCIDR == "" || c.PodCIDR == cluster.PodCIDR {
		t.Errorf("second cluster's pod CIDR %q, package cluster's %q: want two different ranges", c.PodCIDR, cluster.PodCIDR)
	}
	logDir := c.LogDir
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, pid := range started {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("process %d still exists after Stop", pid)
		}
	}
	if _, err := os.Stat(logDir); !os.IsNotExist(err) {
		t.Errorf("log directory %s still there after a clean Stop (err %v)", logDir, err)
	}
}

// Every row of versions.txt has a tools module file that builds exactly
// its versions, and go.mod (the module editors and `go` in internal/tools
// see) is the newest row's.
func TestVersionsMatchToolsModules(t *testing.T) {
	rows := testcluster.SupportedVersions()
	check := func(file string, v testcluster.Versions) {
		mod, err := os.ReadFile(filepath.Join("..", "tools", file))
		if err != nil {
			t.Fatal(err)
		}
		for dep, want := range map[string]string{
			"k8s.io/kubernetes":         v.Kubernetes,
			"go.etcd.io/etcd/server/v3": v.Etcd,
			"k8s.io/component-base":     "v0." + strings.TrimPrefix(v.Kubernetes, "v1."),
		} {
			re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(dep) + `\s+(v\S+)\s*$`)
			m := re.FindSubmatch(mod)
			if m == nil || string(m[1]) != want {
				t.Errorf("internal/tools/%s requires %s %q, versions.txt row %s says %s", file, dep, m, v.Minor, want)
			}
		}
		if _, err := os.Stat(filepath.Join("..", "tools", strings.TrimSuffix(file, ".mod")+".sum")); err != nil {
			t.Errorf("internal/tools/%s has no go.sum beside it: %v", file, err)
		}
	}
	for _, v := range rows {
		check(filepath.Join("mod", v.Minor+".mod"), v)
	}
	check("go.mod", rows[len(rows)-1])
	// Under `make test` the binary directory comes from build.sh; it must
	// be the one DefaultBinDir computes, or a plain `go test` would look
	// elsewhere.
	if dir := os.Getenv("SPAWNKIT_TESTBIN"); dir != "" && os.Getenv("SPAWNKIT_TESTBIN_CACHE") == "" {
		want, err := testcluster.DefaultBinDir()
		if err != nil {
			t.Fatal(err)
		}
		if dir != want {
			t.Errorf("build.sh built into %s, DefaultBinDir is %s", dir, want)
		}
	}
}

// The API server under test is the release SPAWNKIT_K8S selected (the
// newest when unset): a matrix run whose binaries were mixed up fails here
// rather than reporting one version's results as another's.
func TestServerIsSelectedVersion(t *testing.T) {
	c := testcluster.Require(t, cluster)
	want, err := testcluster.SelectedVersions()
	if err != nil {
		t.Fatal(err)
	}
	wantDir, err := testcluster.BinDirFor(want)
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("SPAWNKIT_TESTBIN"); dir != "" && dir != wantDir {
		t.Skipf("SPAWNKIT_TESTBIN=%s is not build.sh's directory for Kubernetes %s (%s): binaries of unknown version", dir, want.Minor, wantDir)
	}
	if got := c.ServerVersion.GitVersion; got != want.Kubernetes {
		t.Errorf("API server reports %s, SPAWNKIT_K8S selected %s", got, want.Kubernetes)
	}
	// The other components are the same release: the controller-manager's
	// and scheduler's /version are not served without authn wiring, so ask
	// the binaries themselves.
	for _, name := range []string{"kube-scheduler", "kube-controller-manager"} {
		out, err := exec.Command(filepath.Join(wantDir, name), "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v: %s", name, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != "Kubernetes "+want.Kubernetes {
			t.Errorf("%s --version = %q, want Kubernetes %s", name, got, want.Kubernetes)
		}
	}
}

func TestMissingBinariesError(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SPAWNKIT_TESTBIN", "")
	t.Setenv("KUBEBUILDER_ASSETS", "")
	_, err := testcluster.Start(t.Context(), testcluster.Options{BinDir: dir})
	if err == nil {
		t.Fatal("Start with an empty binary directory succeeded")
	}
	for _, want := range []string{"etcd", "kube-apiserver", dir, "make testbin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitForEventReasons watches the pod's events until every reason in want
// has been seen, and returns the reasons seen in order.
func waitForEventReasons(t *testing.T, ctx context.Context, ns, pod string, want ...string) []string {
	t.Helper()
	c := cluster
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		fields.OneTermEqualSelector("involvedObject.name", pod),
	).String()
	events := c.Client.CoreV1().Events(ns)
	list, err := events.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var seen []string
	for _, e := range list.Items {
		seen = append(seen, e.Reason)
	}
	missing := func() []string {
		var m []string
		for _, r := range want {
			if !slices.Contains(seen, r) {
				m = append(m, r)
			}
		}
		return m
	}
	if len(missing()) == 0 {
		return seen
	}
	w, err := events.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch events: %v", err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if e, ok := ev.Object.(*corev1.Event); ok && ev.Type == watch.Added {
			seen = append(seen, e.Reason)
			if len(missing()) == 0 {
				return seen
			}
		}
	}
	t.Fatalf("events of pod %s/%s: saw %v, missing %v (%v)", ns, pod, seen, missing(), ctx.Err())
	return nil
}

// childPIDs lists the processes whose parent is this test binary.
func childPIDs(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("reading /proc: %v", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func TestClaimIsProvisionedAndDeleted(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)
	claims := c.Client.CoreV1().PersistentVolumeClaims(ns)
	pvc, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "home"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != testcluster.StorageClass {
		t.Fatalf("claim got storage class %v, want the default %s", pvc.Spec.StorageClassName, testcluster.StorageClass)
	}
	w, err := claims.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "home").String(), ResourceVersion: pvc.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.PersistentVolumeClaim); ok && p.Status.Phase == corev1.ClaimBound {
			break
		}
	}
	bound, err := claims.Get(ctx, "home", metav1.GetOptions{})
	if err != nil || bound.Status.Phase != corev1.ClaimBound || bound.Spec.VolumeName == "" {
		t.Fatalf("claim not bound: %+v, %v", bound.Status, err)
	}
	// A pod using the claim schedules and runs.
	pod := testPod("with-claim", nil)
	pod.Spec.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home"}}}}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForPod(ctx, ns, "with-claim", testcluster.PodRunning); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "with-claim", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForPod(ctx, ns, "with-claim", testcluster.PodGone); err != nil {
		t.Fatal(err)
	}
	// Deleting the claim (its protection finalizer lifted once no pod uses
	// it) removes it and its volume.
	if err := claims.Delete(ctx, "home", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	vw, err := c.Client.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", bound.Spec.VolumeName).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer vw.Stop()
	if _, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, bound.Spec.VolumeName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return
	}
	for ev := range vw.ResultChan() {
		if ev.Type == watch.Deleted {
			return
		}
	}
	t.Fatalf("volume %s not deleted with its claim: %v", bound.Spec.VolumeName, ctx.Err())
}

// TestKilledBinaryLeavesNoProcesses runs a helper test binary that starts
// a Lifecycle cluster, kills it with SIGKILL (no teardown runs, as when go
// test's -timeout fires) and checks that every component dies with it.
func TestKilledBinaryLeavesNoProcesses(t *testing.T) {
	if os.Getenv("TESTCLUSTER_HELPER") == "1" {
		c, err := testcluster.Start(context.Background(), testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("LOGS", c.LogDir)
		for _, pid := range childPIDs(t) {
			fmt.Println("PID", pid)
		}
		fmt.Println("READY")
		select {} // wait to be killed
	}
	testcluster.Require(t, cluster)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledBinaryLeavesNoProcesses$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "TESTCLUSTER_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	var logDir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if pid, ok := strings.CutPrefix(line, "PID "); ok {
			n, _ := strconv.Atoi(pid)
			pids = append(pids, n)
		}
		if dir, ok := strings.CutPrefix(line, "LOGS "); ok {
			logDir = dir
		}
		if strings.HasPrefix(line, "ERROR") {
			t.Fatal(line)
		}
		if line == "READY" {
			break
		}
	}
	defer os.RemoveAll(logDir)
	if len(pids) != 5 {
		_ = cmd.Process.Kill()
		t.Fatalf("helper reported %d component processes, want 5", len(pids))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	alive := func() []int {
		var left []int
		for _, pid := range pids {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
			if f := strings.Fields(rest); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
				left = append(left, pid)
			}
		}
		return left
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, pid := range alive() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	testutil.EventuallyEvery(t, 50*time.Millisecond, 10*time.Second, "the components to end with the test binary", func() error {
		if left := alive(); len(left) > 0 {
			return fmt.Errorf("components %v outlived the killed test binary", left)
		}
		return nil
	})
}

// TestGracefulDeleteNeverRemovesANewPodOfTheSameName: the simulated
// kubelet finishes a graceful delete with a UID precondition, as the real
// one does, so a pod re-created under the name of one whose graceful
// delete is still pending survives it. kwok's own pod-delete stage (by
// name alone) failed this in some rounds.
func TestGracefulDeleteNeverRemovesANewPodOfTheSameName(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 120*time.Second)
	pods := c.Client.CoreV1().Pods(ns)
	running := func(p *corev1.Pod) (bool, error) { return p != nil && p.Status.Phase == corev1.PodRunning, nil }
	for round := range 10 {
		old, err := pods.Create(ctx, testPod("reused", nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("round %d: create: %v", round, err)
		}
		if _, err := c.WaitForPod(ctx, ns, "reused", running); err != nil {
			t.Fatal(err)
		}
		// A graceful delete (the kubelet's turn to finish it), then a
		// forced one before the kubelet has, then a new pod at once.
		if err := pods.Delete(ctx, "reused", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
			t.Fatalf("round %d: graceful delete: %v", round, err)
		}
		err = pods.Delete(ctx, "reused", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &old.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			t.Fatalf("round %d: forced delete: %v", round, err)
		}
		var fresh *corev1.Pod
		testutil.EventuallyEvery(t, 5*time.Millisecond, 30*time.Second, "the pod re-created", func() error {
			fresh, err = pods.Create(ctx, testPod("reused", nil), metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("round %d: re-create: %v", round, err)
			}
			if err != nil {
				return fmt.Errorf("round %d: re-creating the pod: %w", round, err)
			}
			return nil
		})
		if _, err := c.WaitForPod(ctx, ns, "reused", running); err != nil {
			t.Fatal(err)
		}
		// The finisher takes deleted pods in the order it sees them: once
		// it has finished a pod deleted after the old one, it has taken
		// the old one's delete, the one that must not hit the new pod.
		marker := fmt.Sprintf("marker-%d", round)
		if _, err := pods.Create(ctx, testPod(marker, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitForPod(ctx, ns, marker, running); err != nil {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, marker, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
			t.Fatalf("round %d: graceful delete of %s: %v", round, marker, err)
		}
		if _, err := c.WaitForPod(ctx, ns, marker, testcluster.PodGone); err != nil {
			t.Fatalf("round %d: the finisher never finished %s's graceful delete: %v", round, marker, err)
		}
		got, err := pods.Get(ctx, "reused", metav1.GetOptions{})
		if err != nil || got.UID != fresh.UID || got.DeletionTimestamp != nil {
			t.Fatalf("round %d: the new pod (uid %s) after the old one's pending delete: %v, %v", round, fresh.UID, got, err)
		}
		if err := pods.Delete(ctx, "reused", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitForPod(ctx, ns, "reused", testcluster.PodGone); err != nil {
			t.Fatal(err)
		}
	}
}
