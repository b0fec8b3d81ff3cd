package testcluster

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

//go:embed stages.yaml
var stagesYAML []byte

// Level is how much of a cluster to run.
type Level int

const (
	// APIServer runs etcd and kube-apiserver (envtest): objects can be
	// created, read, watched and deleted, but nothing schedules or runs pods.
	APIServer Level = iota + 1

	// Lifecycle adds kube-scheduler, kube-controller-manager (node
	// lifecycle, garbage collector and namespace controllers) and kwok with
	// fake nodes: pods are scheduled, get an IP, become Running and Ready
	// and emit events; owner references cascade; namespaces terminate.
	Lifecycle
)

func (l Level) String() string {
	switch l {
	case APIServer:
		return "api-server"
	case Lifecycle:
		return "lifecycle"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Options configure Start. The zero value starts an API-level cluster.
type Options struct {
	// Level is how much to run. Default: APIServer.
	Level Level

	// Nodes is how many fake nodes a Lifecycle cluster has. Each offers
	// 1000 CPUs, 4Ti of memory and 10,000 pods. Default: 2.
	Nodes int

	// BinDir holds the binaries. Default: $SPAWNKIT_TESTBIN, else
	// $KUBEBUILDER_ASSETS, else DefaultBinDir().
	BinDir string

	// LogDir receives one log file per component and the admin kubeconfig.
	// Default: a new temporary directory, removed by Stop unless
	// KeepLogs is set.
	LogDir string

	// KeepLogs keeps LogDir after Stop (Main sets it when a test failed).
	KeepLogs bool

	// Progress receives one line per start-up step. Default: discarded.
	Progress io.Writer

	// PodCIDR is the range pods get their IPs from (Lifecycle only). It
	// must lie within 127.0.0.0/8 and be a /24 or larger; the fake nodes'
	// InternalIP, and so every pod's hostIP, is its last host address.
	// Default: a 127.X.0.0/16 that no other cluster on this machine holds
	// (see Cluster.PodCIDR).
	PodCIDR string

	// Responders makes every Running pod answer HTTP on its pod IP, on
	// each TCP port its containers declare, with an Answer as JSON
	// (Lifecycle only); BootDelayAnnotation delays a pod's answers.
	// Their log is responders.log in LogDir. Default: false.
	Responders bool

	// Workloads adds kube-controller-manager's deployment, replicaset,
	// statefulset and job controllers (Lifecycle only), so that applying a
	// Deployment such as deploy/'s makes pods. They are kwok's pods: they
	// are scheduled and turn Running, but no container runs in them.
	// spawnkit itself needs none of these controllers, so tests leave them
	// out. Default: false.
	Workloads bool
}

// Timings says how long each part of Start took.
type Timings struct {
	// ControlPlane is etcd and kube-apiserver up and serving.
	ControlPlane time.Duration
	// Nodes is the other components started and every node Ready with
	// no not-ready taint (Lifecycle only).
	Nodes time.Duration
	// FirstPod is the warm-up pod going from create to Running with an IP
	// (Lifecycle only): a check that scheduling and kwok work end to end.
	FirstPod time.Duration
	// Total is the whole of Start.
	Total time.Duration
}

// Cluster is a running simulated cluster. Its fields are read-only; its
// methods are safe for concurrent use except Stop, which must be called
// once, after every user is done.
type Cluster struct {
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// LogDir holds each component's log.
	LogDir string
	// Level is what was started.
	Level Level
	// Timings measured during Start.
	Timings Timings
	// PodCIDR is the range pods get their IPs from, as "127.X.0.0/16"
	// (Lifecycle only; empty otherwise).
	PodCIDR string
	// ServerVersion is what the API server reports through discovery
	// (/version): the Kubernetes release actually under test, whichever
	// binary directory was picked.
	ServerVersion *version.Info

	env      *envtest.Environment
	procs    []*process
	keepLogs bool
	ownsLogs bool
	// podCIDRLease holds a default PodCIDR until Stop.
	podCIDRLease *cidrLease
	// stopResponders ends the responders; respondersDone is closed when
	// they have stopped. Both are nil without Options.Responders.
	stopResponders context.CancelFunc
	respondersDone chan struct{}
	respondersLog  *os.File
	// stopFinisher ends the pod finisher (Lifecycle only); finisherDone is
	// closed when it has stopped.
	stopFinisher context.CancelFunc
	finisherDone chan struct{}
	finisherLog  *os.File
}

const (
	// StorageClass is the default StorageClass of a Lifecycle cluster:
	// its claims are provisioned and bound at once by kwok.
	StorageClass = "kwok-volume"
	// NodeLabel marks the fake nodes (value "true").
	NodeLabel = "testcluster.spawnkit.dev/fake-node"
	// kwokNodeAnnotation is the annotation kwok is told to manage nodes by.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
)

// Start starts a cluster. ctx bounds start-up only: the cluster runs until
// Stop. On error everything already started is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	begin := time.Now()
	if opts.Level == 0 {
		opts.Level = APIServer
	}
	var podCIDR netip.Prefix
	if opts.PodCIDR != "" {
		if podCIDR, err = parsePodCIDR(opts.PodCIDR); err != nil {
			return nil, err
		}
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 2
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	binDir, err := resolveBinDir(opts.BinDir, opts.Level)
	if err != nil {
		return nil, err
	}

	c = &Cluster{Level: opts.Level, LogDir: opts.LogDir, keepLogs: opts.KeepLogs}
	if c.LogDir == "" {
		if c.LogDir, err = os.MkdirTemp("", "spawnkit-testcluster-"); err != nil {
			return nil, fmt.Errorf("creating log directory: %w", err)
		}
		c.ownsLogs = true
	} else if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating log directory: %w", err)
	}
	defer func() {
		if err != nil {
			// Keep the logs: they are how a failed start is diagnosed.
			c.keepLogs = true
			err = errors.Join(fmt.Errorf("%w (component logs in %s)", err, c.LogDir), c.Stop())
			c = nil
		}
	}()

	fmt.Fprintf(progress, "testcluster: starting etcd and kube-apiserver from %s\n", binDir)
	if err := c.startControlPlane(binDir); err != nil {
		return c, err
	}
	c.Timings.ControlPlane = time.Since(begin)
	if c.ServerVersion, err = c.Client.Discovery().ServerVersion(); err != nil {
		return c, fmt.Errorf("reading the API server's version: %w", err)
	}
	fmt.Fprintf(progress, "testcluster: api server %s ready at %s in %s\n", c.ServerVersion.GitVersion, c.Config.Host, c.Timings.ControlPlane.Round(time.Millisecond))
	if err := ctx.Err(); err != nil {
		return c, err
	}

	if opts.Level == Lifecycle {
		step := time.Now()
		if !podCIDR.IsValid() {
			if c.podCIDRLease, err = leasePodCIDR(); err != nil {
				return c, err
			}
			podCIDR = c.podCIDRLease.prefix
		}
		c.PodCIDR = podCIDR.String()
		if err := c.startLifecycle(ctx, binDir, opts.Nodes, podCIDR, opts.Workloads); err != nil {
			return c, err
		}
		if err := c.startFinisher(ctx); err != nil {
			return c, err
		}
		c.Timings.Nodes = time.Since(step)
		fmt.Fprintf(progress, "testcluster: scheduler, controller-manager, kwok and %d nodes ready in %s; pod IPs from %s\n",
			opts.Nodes, c.Timings.Nodes.Round(time.Millisecond), c.PodCIDR)
		if opts.Responders {
			if err := c.startResponders(ctx); err != nil {
				return c, err
			}
			fmt.Fprintf(progress, "testcluster: responders answering HTTP for running pods\n")
		}
		step = time.Now()
		if err := c.warmUp(ctx); err != nil {
			return c, err
		}
		c.Timings.FirstPod = time.Since(step)
		fmt.Fprintf(progress, "testcluster: first pod Running in %s\n", c.Timings.FirstPod.Round(time.Millisecond))
	}
	c.Timings.Total = time.Since(begin)
	return c, nil
}

func (c *Cluster) startControlPlane(binDir string) error {
	logs := make([]*os.File, 0, 2)
	for _, name := range []string{"etcd", "kube-apiserver"} {
		f, err := os.Create(filepath.Join(c.LogDir, name+".log"))
		if err != nil {
			return fmt.Errorf("creating log for %s: %w", name, err)
		}
		logs = append(logs, f)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		// Two test packages start clusters side by side on two cores
		// under -race: give start-up room.
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Out: logs[0], Err: logs[0]}
	api := env.ControlPlane.GetAPIServer()
	if err := c.wrapWithDeathSignal(binDir, env); err != nil {
		return err
	}
	api.Out, api.Err = logs[1], logs[1]
	// A fixed certificate directory (envtest otherwise makes a new one,
	// with a new serving CA, at every start) lets RestartAPIServer bring
	// the server back on the same port with the same certificates, so
	// clients built from Config keep working.
	api.CertDir = filepath.Join(c.LogDir, "apiserver-certs")
	// kube-apiserver's graceful shutdown waits up to the request timeout
	// (60 s by default) for open connections, which informers' watches
	// keep open: bound it so StopAPIServer and Stop are quick. Watches are
	// governed by --min-request-timeout and are not cut short by this.
	api.Configure().Set("request-timeout", "10s")
	if err := os.MkdirAll(api.CertDir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", api.CertDir, err)
	}
	c.env = env
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	admin, err := env.AddUser(envtest.User{Name: "spawnkit-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("provisioning the admin user: %w", err)
	}
	c.Config = admin.Config()
	// Tests create many objects quickly; client-go's default 5 QPS would
	// make the client, not the cluster, the thing under test.
	c.Config.QPS, c.Config.Burst = 200, 400
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.LogDir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", c.Kubeconfig, err)
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return fmt.Errorf("building the admin client: %w", err)
	}
	return nil
}

// wrapWithDeathSignal points envtest at small wrappers that run etcd and
// kube-apiserver under setpriv --pdeathsig KILL (util-linux, on every
// Debian system), so they die with a test binary killed without teardown,
// as the components this package starts itself do. Without setpriv the
// binaries run as they are.
func (c *Cluster) wrapWithDeathSignal(binDir string, env *envtest.Environment) error {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil
	}
	dir := filepath.Join(c.LogDir, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	wrap := func(name string) (string, error) {
		path := filepath.Join(dir, name)
		script := fmt.Sprintf("#!/bin/sh\nexec %q --pdeathsig KILL -- %q \"$@\"\n", setpriv, filepath.Join(binDir, name))
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			return "", fmt.Errorf("writing %s: %w", path, err)
		}
		return path, nil
	}
	if env.ControlPlane.Etcd.Path, err = wrap("etcd"); err != nil {
		return err
	}
	if env.ControlPlane.GetAPIServer().Path, err = wrap("kube-apiserver"); err != nil {
		return err
	}
	return nil
}

// controllers is kube-controller-manager's --controllers: the ones spawnkit
// relies on, and with workloads those that turn Deployments, ReplicaSets,
// StatefulSets and Jobs into pods (Options.Workloads).
func controllers(workloads bool) string {
	cs := "node-lifecycle-controller,garbage-collector-controller,namespace-controller," +
		"persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,resourcequota-controller"
	if workloads {
		cs += ",deployment-controller,replicaset-controller,statefulset-controller,job-controller,disruption-controller"
	}
	return cs
}

func (c *Cluster) startLifecycle(ctx context.Context, binDir string, nodes int, podCIDR netip.Prefix, workloads bool) error {
	stages := filepath.Join(c.LogDir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, stagesYAML, 0o644); err != nil {
		return fmt.Errorf("writing kwok stages: %w", err)
	}
	kc := "--kubeconfig=" + c.Kubeconfig
	components := []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{
			kc,
			// The node lifecycle controller lifts the not-ready taint that
			// admission puts on every new node; the garbage collector
			// gives real owner-reference cascades; the namespace
			// controller finishes namespace deletion.
			// The protection controllers lift the finalizers admission
			// puts on claims and volumes, so deleted claims go away.
			"--controllers=" + controllers(workloads),
			"--leader-elect=false", "--secure-port=0",
			"--node-monitor-period=1s",
			"--v=2",
		}},
		{"kube-scheduler", []string{
			kc, "--authentication-kubeconfig=" + c.Kubeconfig, "--authorization-kubeconfig=" + c.Kubeconfig,
			"--leader-elect=false", "--secure-port=0", "--v=2",
			// The scheduler's client defaults to 50 QPS, the rate the
			// benchmarks' clients create pods at: one binding per pod, so
			// any stall left it behind for the rest of a 1,000-pod burst,
			// and the time to Ready measured the scheduler's queue, not
			// the client. kwok's own client is unlimited, and kwokctl lifts
			// the scheduler's limits the same way (DisableQPSLimits).
			"--kube-api-qps=5000", "--kube-api-burst=10000",
		}},
		{"kwok", []string{
			kc, "--config=" + stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
			"--cidr=" + podCIDR.String(), "--node-ip=" + nodeIP(podCIDR).String(),
			"--node-lease-duration-seconds=40",
		}},
	}
	for _, comp := range components {
		p, err := startProcess(comp.name, filepath.Join(binDir, comp.name), c.LogDir, comp.args...)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
	}
	for i := range nodes {
		if err := c.createNode(ctx, fmt.Sprintf("kwok-node-%d", i)); err != nil {
			return err
		}
	}
	// The default StorageClass that kwok's volume stages provision.
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       "kwok.x-k8s.io/volume",
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", StorageClass, err)
	}
	return c.waitFor(ctx, 60*time.Second, "nodes Ready without the not-ready taint", func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel + "=true"})
		if err != nil {
			return false, nil // the API server may be busy; the deadline bounds this
		}
		ready := 0
		for i := range list.Items {
			if nodeSchedulable(&list.Items[i]) {
				ready++
			}
		}
		return ready == nodes, nil
	})
}

func (c *Cluster) createNode(ctx context.Context, name string) error {
	big := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("4Ti"),
		corev1.ResourcePods:   resource.MustParse("10000"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
			Labels: map[string]string{
				NodeLabel:                       "true",
				corev1.LabelHostname:            name,
				corev1.LabelOSStable:            "linux",
				corev1.LabelArchStable:          "amd64",
				"node-role.kubernetes.io/agent": "",
			},
		},
		Status: corev1.NodeStatus{Capacity: big, Allocatable: big},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	return nil
}

func nodeSchedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// warmUp runs one pod to Running and deletes it: a cluster reported ready
// has scheduled and started a pod end to end.
func (c *Cluster) warmUp(ctx context.Context) error {
	pods := c.Client.CoreV1().Pods(metav1.NamespaceDefault)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "testcluster-warmup"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the warm-up pod: %w", err)
	}
	err := c.waitFor(ctx, 60*time.Second, "the warm-up pod Running", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		return err
	}
	if err := pods.Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the warm-up pod: %w", err)
	}
	return nil
}

// waitFor polls cond until it holds, a component dies, or timeout passes.
// Only start-up uses it: the SDK itself waits on informers, not polls.
func (c *Cluster) waitFor(ctx context.Context, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.checkProcesses(); err != nil {
			return false, err
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// checkProcesses returns an error naming the first component that has
// exited, with the end of its log.
func (c *Cluster) checkProcesses() error {
	for _, p := range c.procs {
		if done, exitErr := p.exited(); done {
			return fmt.Errorf("%s exited (%v); last lines of its log:\n%s", p.name, exitErr, c.LogTail(p.name, 15))
		}
	}
	return nil
}

// LogTail returns the last n lines of a component's log ("etcd",
// "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok",
// and "responders" with Options.Responders).
func (c *Cluster) LogTail(component string, n int) string {
	data, err := os.ReadFile(filepath.Join(c.LogDir, component+".log"))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop stops the responders and every component, newest first, waits
// until each has exited, frees the default pod range, and removes the log
// directory unless it is to be kept.
func (c *Cluster) Stop() error {
	var errs []error
	if c.stopResponders != nil {
		c.stopResponders()
		<-c.respondersDone
		c.stopResponders = nil
	}
	if c.respondersLog != nil {
		c.respondersLog.Close()
		c.respondersLog = nil
	}
	if c.stopFinisher != nil {
		c.stopFinisher()
		<-c.finisherDone
		c.stopFinisher = nil
	}
	if c.finisherLog != nil {
		c.finisherLog.Close()
		c.finisherLog = nil
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.procs = nil
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
		for _, w := range []io.Writer{c.env.ControlPlane.Etcd.Out, c.env.ControlPlane.GetAPIServer().Out} {
			if f, ok := w.(*os.File); ok {
				f.Close()
			}
		}
		c.env = nil
	}
	// Only now that kwok is gone can another cluster hand out these IPs.
	if err := c.podCIDRLease.release(); err != nil {
		errs = append(errs, fmt.Errorf("releasing pod range %s: %w", c.PodCIDR, err))
	}
	c.podCIDRLease = nil
	if c.ownsLogs && !c.keepLogs && len(errs) == 0 {
		if err := os.RemoveAll(c.LogDir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.LogDir, err))
		}
	}
	return errors.Join(errs...)
}

// StopAPIServer stops kube-apiserver, leaving etcd and the other
// components running, to test how clients ride out an API outage.
// StartAPIServer brings it back. Not safe to call concurrently.
func (c *Cluster) StopAPIServer() error {
	if err := c.env.ControlPlane.GetAPIServer().Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address with the same certificates, and returns once it serves.
func (c *Cluster) StartAPIServer() error {
	if err := c.env.ControlPlane.GetAPIServer().Start(); err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	return nil
}

// CompactEtcd compacts etcd's history up to its current revision, as the
// API server's periodic compaction does, through etcd's JSON gateway on
// its loopback client URL, and returns that revision: a watch the API
// server can no longer serve from its watch cache (after a restart)
// then ends with 410 Gone.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	u := c.env.ControlPlane.Etcd.URL
	if u == nil {
		return 0, errors.New("testcluster: etcd has no client URL")
	}
	post := func(path string, body any, out any) error {
		data, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String()+path, bytes.NewReader(data))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, msg)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := post("/v3/kv/range", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte("/spawnkit-compact"))}, &rng); err != nil {
		return 0, fmt.Errorf("testcluster: reading etcd's revision: %w", err)
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("testcluster: etcd's revision %q: %w", rng.Header.Revision, err)
	}
	var done struct{}
	if err := post("/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, &done); err != nil {
		return 0, fmt.Errorf("testcluster: compacting etcd: %w", err)
	}
	return rev, nil
}

// KeepLogs makes Stop keep the log directory; Main calls it when a test
// failed so the logs can be read.
func (c *Cluster) KeepLogs() { c.keepLogs = true }
