package service

// deploy/ as a platform team applies it: every file of the kustomize base
// (and of the user-namespaces component) is accepted by a real API server,
// dry-run and then for real, in a namespace that enforces the restricted
// Pod Security profile; the Deployment's two pods are scheduled and Ready
// (kwok runs no container); and since nothing runs in those pods, the
// binary is started here with exactly the Deployment's args and env, as
// the ServiceAccount the manifests bind, and answers its probes and its
// API on the ports the manifests name.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/spawner"
)

// deployDir is the kustomize base, from this package's directory.
const deployDir = "../../../deploy"

// deployImage is the image name deploy/README.md documents.
const deployImage = "ghcr.io/spawnkit/spawnkit-service:v" + spawner.Version

// deployTimeout bounds each wait of the deploy test.
const deployTimeout = 60 * time.Second

func TestDeploy(t *testing.T) {
	c := testcluster.Require(t, cluster)
	base := readKustomize(t, deployDir, "Kustomization")
	component := readKustomize(t, filepath.Join(deployDir, "user-namespaces"), "Component")
	d := newDeployEnv(t, c)
	m := base.manifests(t)

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"manifests agree", func(t *testing.T) { m.check(t) }},
		{"dry-run", func(t *testing.T) { d.apply(t, base, true) }},
		{"apply", func(t *testing.T) {
			d.createSecrets(t)
			d.apply(t, base, false)
			d.checkScheduled(t, m)
		}},
		{"user-namespaces component", func(t *testing.T) {
			d.apply(t, component, true)
			d.apply(t, component, false)
		}},
		{"check mode", func(t *testing.T) { d.runCheck(t, m) }},
		{"binary serves on the manifest's ports", func(t *testing.T) { d.runBinary(t, m) }},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.FailNow() // each step needs the ones before it
		}
	}
}

// kustomize is one kustomization.yaml (a base or a component) and the
// documents of its resources, in order.
type kustomize struct {
	dir  string
	docs []deployDoc
}

// deployDoc is one YAML document of a resource file.
type deployDoc struct {
	file string
	obj  *unstructured.Unstructured
}

func (d deployDoc) String() string {
	return fmt.Sprintf("%s %s (%s)", d.obj.GetKind(), d.obj.GetName(), d.file)
}

// readKustomize parses dir/kustomization.yaml and decodes every document
// of every file it lists. It refuses any field but resources: this test
// applies the files as they are, which is what kustomize builds only
// while the kustomization transforms nothing.
func readKustomize(t *testing.T, dir, kind string) kustomize {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if k["kind"] != kind {
		t.Fatalf("%s/kustomization.yaml: kind %v, want %s", dir, k["kind"], kind)
	}
	for field := range k {
		if !slices.Contains([]string{"apiVersion", "kind", "resources"}, field) {
			t.Fatalf("%s/kustomization.yaml has %q: this test applies the resources untransformed, so it would not test what kustomize builds; teach it %q first", dir, field, field)
		}
	}
	var files []string
	if err := yaml.Unmarshal(data, &struct {
		Resources *[]string `json:"resources"`
	}{&files}); err != nil {
		t.Fatalf("%s/kustomization.yaml resources: %v", dir, err)
	}
	if len(files) == 0 {
		t.Fatalf("%s/kustomization.yaml lists no resources", dir)
	}
	out := kustomize{dir: dir}
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s/kustomization.yaml lists %s: %v", dir, f, err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var obj map[string]any
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s/%s: %v", dir, f, err)
			}
			if obj == nil {
				continue // an empty document
			}
			out.docs = append(out.docs, deployDoc{file: filepath.Join(filepath.Base(dir), f), obj: &unstructured.Unstructured{Object: obj}})
		}
	}
	return out
}

// deployManifests are the base's objects the test reasons about.
type deployManifests struct {
	deployment     appsv1.Deployment
	service        corev1.Service
	pdb            policyv1.PodDisruptionBudget
	serviceAccount corev1.ServiceAccount
	bindings       []rbacv1.RoleBinding
	roles          []rbacv1.Role
}

// manifests decodes the base's objects into their types, strictly: a
// field the type lacks is a typo the API server would drop or refuse.
func (k kustomize) manifests(t *testing.T) *deployManifests {
	t.Helper()
	m := &deployManifests{}
	counts := map[string]int{}
	for _, d := range k.docs {
		var into any
		switch d.obj.GetKind() {
		case "Deployment":
			into = &m.deployment
		case "Service":
			into = &m.service
		case "PodDisruptionBudget":
			into = &m.pdb
		case "ServiceAccount":
			into = &m.serviceAccount
		case "RoleBinding":
			m.bindings = append(m.bindings, rbacv1.RoleBinding{})
			into = &m.bindings[len(m.bindings)-1]
		case "Role":
			m.roles = append(m.roles, rbacv1.Role{})
			into = &m.roles[len(m.roles)-1]
		default:
			continue
		}
		counts[d.obj.GetKind()]++
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(d.obj.Object, into, true); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "ServiceAccount"} {
		if counts[kind] != 1 {
			t.Fatalf("the base has %d %s, want 1", counts[kind], kind)
		}
	}
	return m
}

// container is the Deployment's one container.
func (m *deployManifests) container(t *testing.T) *corev1.Container {
	t.Helper()
	cs := m.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(cs))
	}
	return &cs[0]
}

// containerPort resolves a probe's or a Service's port (a number or a
// container port's name) to the container's port number.
func (m *deployManifests) containerPort(t *testing.T, what string, port intstr.IntOrString) int {
	t.Helper()
	c := m.container(t)
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("%s names port %s, which container %s does not declare (ports %v)", what, port.String(), c.Name, c.Ports)
	return 0
}

// servicePort is the Service's port named name.
func (m *deployManifests) servicePort(t *testing.T, name string) corev1.ServicePort {
	t.Helper()
	for _, p := range m.service.Spec.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("the Service has no port named %q (ports %v)", name, m.service.Spec.Ports)
	return corev1.ServicePort{}
}

// check holds what the API server does not: the parts of the base agree
// with one another and with the command.
func (m *deployManifests) check(t *testing.T) {
	dep := &m.deployment
	c := m.container(t)
	if c.Image != deployImage {
		t.Errorf("image %q, want %q (spawner.Version, as deploy/README.md documents)", c.Image, deployImage)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	if !slices.Contains(c.Args, "-leader-elect") && !slices.Contains(c.Args, "-leader-elect=true") {
		t.Errorf("args %q: two replicas need -leader-elect", c.Args)
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("the Deployment's selector %v does not select its pods' labels %v (%v)", dep.Spec.Selector, podLabels, err)
	}
	if svcSel := labels.SelectorFromSet(m.service.Spec.Selector); len(m.service.Spec.Selector) == 0 || !svcSel.Matches(podLabels) {
		t.Errorf("the Service's selector %v does not select the Deployment's pods %v", m.service.Spec.Selector, podLabels)
	}
	if pdbSel, err := metav1.LabelSelectorAsSelector(m.pdb.Spec.Selector); err != nil || !pdbSel.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget's selector %v does not select the Deployment's pods %v (%v)", m.pdb.Spec.Selector, podLabels, err)
	}
	if m.pdb.Spec.MinAvailable == nil || m.pdb.Spec.MinAvailable.String() != "1" {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", m.pdb.Spec.MinAvailable)
	}
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != m.serviceAccount.Name {
		t.Errorf("the pods run as ServiceAccount %q, the base creates %q", sa, m.serviceAccount.Name)
	}
	// Both Roles are bound to the ServiceAccount.
	bound := map[string]bool{}
	for _, b := range m.bindings {
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == m.serviceAccount.Name && s.Namespace == "" && b.RoleRef.Kind == "Role" {
				bound[b.RoleRef.Name] = true
			}
		}
	}
	if len(m.roles) != 2 {
		t.Errorf("the base has %d Roles, want 2 (deploy/role.yaml)", len(m.roles))
	}
	for _, r := range m.roles {
		if !bound[r.Name] {
			t.Errorf("Role %s is not bound to ServiceAccount %s by a RoleBinding without a subject namespace", r.Name, m.serviceAccount.Name)
		}
	}
	// The Service's ports reach the container's.
	// The documented port: the flag's default, which nothing JupyterHub
	// or z2jh listens on (8081 is the hub's own, in the same pod when the
	// service is the hub's sidecar).
	if api := m.servicePort(t, "api"); api.Port != 8765 {
		t.Errorf("Service port api is %d, want 8765", api.Port)
	}
	for _, p := range m.service.Spec.Ports {
		m.containerPort(t, "Service port "+p.Name, p.TargetPort)
	}
	for name, p := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", name)
			continue
		}
		m.containerPort(t, name, p.HTTPGet.Port)
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readinessProbe path %q, want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/livez" {
		t.Errorf("livenessProbe path %q, want /livez", c.LivenessProbe.HTTPGet.Path)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("the container's root filesystem is not read-only")
	}
	if r := c.Resources; r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("resources %v: want cpu and memory requests and a memory limit", r)
	}
}

// deployEnv is one run of the deploy test: its namespace on the cluster
// and the credentials it made.
type deployEnv struct {
	c      *testcluster.Cluster
	ns     string
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	warn   *deployWarnings
	token  string
	ca     *x509.CertPool
	// certPEM and keyPEM are the API's serving certificate, for the names
	// the Service gives the pods.
	certPEM, keyPEM []byte
}

// deployWarnings collects the API server's warnings (a Pod Security violation
// of a Deployment's template is one; so is an unknown field).
type deployWarnings struct {
	mu   sync.Mutex // guards list
	list []string
}

func (w *deployWarnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *deployWarnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

func newDeployEnv(t *testing.T, c *testcluster.Cluster) *deployEnv {
	t.Helper()
	ctx := t.Context()
	ns := fmt.Sprintf("deploy-%d", time.Now().UnixNano()%1e9)
	// The restricted profile, enforced: a pod of the Deployment that
	// breaks it is refused, and the Deployment gets a warning.
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "latest",
	}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	})
	w := &deployWarnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &deployEnv{c: c, ns: ns, dyn: dyn, warn: w, token: "deploy-test-token-" + ns,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))}
	d.makeCert(t)
	return d
}

// makeCert makes a CA and the API's serving certificate for the names a
// hub uses through the Service.
func (d *deployEnv) makeCert(t *testing.T) {
	t.Helper()
	svc := "spawnkit-service"
	c := testutil.NewCert(t, 2, svc, svc+"."+d.ns, svc+"."+d.ns+".svc", svc+"."+d.ns+".svc.cluster.local")
	d.certPEM, d.keyPEM, d.ca = c.CertPEM, c.KeyPEM, c.Roots()
}

// createSecrets creates the two Secrets deploy/README.md tells the
// operator to create, with the test's token and certificate.
func (d *deployEnv) createSecrets(t *testing.T) {
	t.Helper()
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "spawnkit-service-token"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"token": []byte(d.token)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "spawnkit-service-tls"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: d.certPEM, corev1.TLSPrivateKeyKey: d.keyPEM}},
	} {
		if _, err := d.c.Client.CoreV1().Secrets(d.ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// apply server-side applies every document of k, in order, into the
// test's namespace, strictly (an unknown or duplicate field fails), and
// fails on any warning. A namespaced object must not name a namespace
// itself (kubectl apply -n would refuse it); a ServiceAccount subject of a
// cluster-scoped binding gets the test's namespace, as its comment tells
// the operator to do. A dry run must leave nothing behind.
func (d *deployEnv) apply(t *testing.T, k kustomize, dryRun bool) {
	t.Helper()
	ctx := t.Context()
	opts := metav1.PatchOptions{FieldManager: "spawnkit-deploy-test", Force: deployPtr(true), FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, doc := range k.docs {
		obj := doc.obj.DeepCopy()
		gvk := obj.GroupVersionKind()
		mapping, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		var ri dynamic.ResourceInterface = d.dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if ns := obj.GetNamespace(); ns != "" {
				t.Fatalf("%s names namespace %q: the base must apply to any namespace", doc, ns)
			}
			obj.SetNamespace(d.ns)
			ri = d.dyn.Resource(mapping.Resource).Namespace(d.ns)
		} else {
			d.bindSubjects(t, doc, obj)
			if !dryRun {
				t.Cleanup(func() {
					_ = d.dyn.Resource(mapping.Resource).Delete(context.WithoutCancel(ctx), obj.GetName(), metav1.DeleteOptions{})
				})
			}
		}
		data, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
			t.Fatalf("applying %s (dry run %v): %v", doc, dryRun, err)
		}
		if w := d.warn.take(); len(w) > 0 {
			t.Errorf("applying %s (dry run %v): warnings %q", doc, dryRun, w)
		}
		if dryRun {
			if _, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s exists after a dry run (%v)", doc, err)
			}
		}
	}
}

// bindSubjects points the ServiceAccount subjects of a cluster-scoped
// binding at the test's namespace.
func (d *deployEnv) bindSubjects(t *testing.T, doc deployDoc, obj *unstructured.Unstructured) {
	t.Helper()
	subjects, found, err := unstructured.NestedSlice(obj.Object, "subjects")
	if err != nil || !found {
		return
	}
	for i, s := range subjects {
		sm, ok := s.(map[string]any)
		if !ok || sm["kind"] != rbacv1.ServiceAccountKind {
			continue
		}
		if sm["namespace"] == nil {
			t.Fatalf("%s: a ServiceAccount subject of a cluster-scoped binding needs a namespace", doc)
		}
		sm["namespace"] = d.ns
		subjects[i] = sm
	}
	if err := unstructured.SetNestedSlice(obj.Object, subjects, "subjects"); err != nil {
		t.Fatal(err)
	}
}

// checkScheduled runs the controllers a Deployment needs (the test
// cluster's controller-manager runs only the ones spawnkit relies on) and
// waits until the Deployment's ReplicaSet has two pods, scheduled,
// Running and Ready (kwok reports a bound pod's containers ready at once;
// it runs no probe), and the Service and PodDisruptionBudget select them.
func (d *deployEnv) checkScheduled(t *testing.T, m *deployManifests) {
	t.Helper()
	startDeploymentControllers(t, d.c)
	ctx := t.Context()
	client := d.c.Client
	dep, err := client.AppsV1().Deployments(d.ns).Get(ctx, m.deployment.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := int(*m.deployment.Spec.Replicas)
	testutil.EventuallyEvery(t, poll, deployTimeout, "the Deployment's pods Running and Ready", func() error {
		rs, err := client.AppsV1().ReplicaSets(d.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var owned []appsv1.ReplicaSet
		for _, r := range rs.Items {
			if metav1.IsControlledBy(&r, dep) {
				owned = append(owned, r)
			}
		}
		if len(owned) != 1 {
			return fmt.Errorf("%d ReplicaSets of the Deployment", len(owned))
		}
		pods, err := client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var ready []string
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if !metav1.IsControlledBy(p, &owned[0]) {
				continue
			}
			states = append(states, fmt.Sprintf("%s node %q phase %s ready %v", p.Name, p.Spec.NodeName, p.Status.Phase, deployPodReady(p)))
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && deployPodReady(p) {
				ready = append(ready, p.Name)
			}
		}
		if len(ready) != want || len(states) != want {
			events, _ := client.CoreV1().Events(d.ns).List(ctx, metav1.ListOptions{})
			var msgs []string
			for _, e := range events.Items {
				if e.Type == corev1.EventTypeWarning {
					msgs = append(msgs, e.InvolvedObject.Name+": "+e.Message)
				}
			}
			return fmt.Errorf("pods %q; warning events %q", states, msgs)
		}
		return nil
	})
	// The Service's selector finds exactly the Deployment's pods.
	pods, err := client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(m.service.Spec.Selector).String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != want {
		t.Errorf("the Service selects %d pods, want %d", len(pods.Items), want)
	}
	testutil.EventuallyEvery(t, poll, deployTimeout, "the Deployment's status", func() error {
		got, err := client.AppsV1().Deployments(d.ns).Get(ctx, m.deployment.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := got.Status
		return pending(int(s.ReadyReplicas) == want && int(s.AvailableReplicas) == want, fmt.Sprintf("%+v", s))
	})
	testutil.EventuallyEvery(t, poll, deployTimeout, "the PodDisruptionBudget to count the pods", func() error {
		pdb, err := client.PolicyV1().PodDisruptionBudgets(d.ns).Get(ctx, m.pdb.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := pdb.Status
		return pending(int(s.ExpectedPods) == want && int(s.CurrentHealthy) == want, fmt.Sprintf("%+v", s))
	})
}

func deployPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// startDeploymentControllers runs a second kube-controller-manager with
// the deployment, replicaset and disruption controllers, which the test
// cluster's own leaves out, until the test ends.
func startDeploymentControllers(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	dir := os.Getenv("SPAWNKIT_TESTBIN")
	if dir == "" {
		dir = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if dir == "" {
		var err error
		if dir, err = testcluster.DefaultBinDir(); err != nil {
			t.Fatal(err)
		}
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "kube-controller-manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig,
		"--controllers=deployment-controller,replicaset-controller,disruption-controller",
		"--leader-elect=false", "--secure-port=0", "--v=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if t.Failed() {
			if out, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("kube-controller-manager (deployment controllers) log, last 4 KiB:\n%s", deployTail(out, 4096))
			}
		}
		logFile.Close()
	})
}

func deployTail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// deployRun is the Deployment's container as this machine runs it: the
// same args and env, with the files of its volumes under root, the
// listen addresses on loopback, and a kubeconfig for the pod's
// ServiceAccount instead of the in-cluster config.
type deployRun struct {
	args []string
	env  []string
	// podName is $POD_NAME (a pod the ReplicaSet made).
	podName string
}

// containerRun resolves the container's env and args. Only file paths inside
// the container's volume mounts and the listen hosts change; everything
// else is as the manifest says.
func (d *deployEnv) containerRun(t *testing.T, m *deployManifests) deployRun {
	t.Helper()
	ctx := t.Context()
	c := m.container(t)
	pods, err := d.c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(m.deployment.Spec.Template.Labels).String()})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no pod of the Deployment to take a name from (%v)", err)
	}
	run := deployRun{podName: pods.Items[0].Name}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			run.env = append(run.env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			run.env = append(run.env, e.Name+"="+run.podName)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			run.env = append(run.env, e.Name+"="+d.ns)
		default:
			t.Fatalf("env %s: the test cannot resolve %+v; teach it", e.Name, e.ValueFrom)
		}
	}
	root := d.materializeVolumes(t, m)
	flagName := ""
	for _, a := range c.Args {
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case strings.HasPrefix(a, "-") && hasValue:
			run.args = append(run.args, name+"="+d.podValue(t, root, c, strings.TrimLeft(name, "-"), value))
			flagName = ""
		case strings.HasPrefix(a, "-"):
			run.args = append(run.args, a)
			flagName = strings.TrimLeft(a, "-")
		default: // the value of the flag before
			run.args = append(run.args, d.podValue(t, root, c, flagName, a))
			flagName = ""
		}
	}
	return run
}

// podValue maps one flag value: a path inside a volume mount to the test's
// copy under root, a listen address to 127.0.0.1 on the same port.
func (d *deployEnv) podValue(t *testing.T, root string, c *corev1.Container, flagName, value string) string {
	t.Helper()
	if flagName == "listen" || flagName == "probe-listen" {
		_, port, err := net.SplitHostPort(value)
		if err != nil {
			t.Fatalf("-%s %q: %v", flagName, value, err)
		}
		return net.JoinHostPort("127.0.0.1", port)
	}
	if !path.IsAbs(value) {
		return value
	}
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(value, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			return filepath.Join(root, filepath.FromSlash(value))
		}
	}
	t.Fatalf("-%s %q is a path in no volume mount of the container: in the image's read-only root it could not be configured", flagName, value)
	return ""
}

// materializeVolumes writes, under a new root, what the kubelet would
// mount: for each volume mount, the keys of its Secret or ConfigMap as
// they are in the cluster now. The config file gets the namespace a pod
// would detect from its ServiceAccount token mount, which the test
// cannot write (/var/run/secrets).
func (d *deployEnv) materializeVolumes(t *testing.T, m *deployManifests) string {
	t.Helper()
	ctx := t.Context()
	root := t.TempDir()
	c := m.container(t)
	volumes := map[string]corev1.Volume{}
	for _, v := range m.deployment.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			t.Fatalf("volume mount %s uses a subPath, which the test does not lay out (and which the kubelet never updates: no rotation)", vm.Name)
		}
		v, ok := volumes[vm.Name]
		if !ok {
			t.Fatalf("volume mount %s has no volume", vm.Name)
		}
		var data map[string][]byte
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			s, err := d.c.Client.CoreV1().Secrets(d.ns).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("volume %s: %v", v.Name, err)
			}
			data, items = s.Data, v.Secret.Items
		case v.ConfigMap != nil:
			cm, err := d.c.Client.CoreV1().ConfigMaps(d.ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("volume %s: %v", v.Name, err)
			}
			data, items = map[string][]byte{}, v.ConfigMap.Items
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
		default:
			t.Fatalf("volume %s is neither a Secret nor a ConfigMap; teach the test", v.Name)
		}
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		dir := filepath.Join(root, filepath.FromSlash(vm.MountPath))
		for _, it := range items {
			content, ok := data[it.Key]
			if !ok {
				t.Fatalf("volume %s: key %q is not in its source", v.Name, it.Key)
			}
			file := filepath.Join(dir, filepath.FromSlash(it.Path))
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, content, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The configuration's namespace, as spawner detects it in a pod.
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "-config="); ok {
			file := filepath.Join(root, filepath.FromSlash(v))
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("-config %s: %v", v, err)
			}
			var cfg map[string]any
			if err := yaml.Unmarshal(raw, &cfg); err != nil {
				t.Fatalf("-config %s: %v", v, err)
			}
			if cfg == nil {
				cfg = map[string]any{}
			}
			if _, set := cfg["namespace"]; !set {
				cfg["namespace"] = d.ns
			}
			out, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, out, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// runCheck runs the binary with -check and the Deployment's args: it
// must accept them, and the files they name, without a cluster.
func (d *deployEnv) runCheck(t *testing.T, m *deployManifests) {
	run := d.containerRun(t, m)
	p := startProc(t, "spawnkit-service -check", run.env, append([]string{"-check"}, run.args...)...)
	if err := p.wait(t, deployTimeout); err != nil {
		t.Fatalf("-check with the Deployment's args %q: %v\n%s", run.args, err, p.out.String())
	}
}

// runBinary runs the binary as the Deployment's container would run,
// authenticated as the pod's ServiceAccount (a client certificate for its
// user name: RBAC grants it exactly what the base's RoleBindings bind),
// and calls it where the manifests say: the probes on the readiness and
// liveness probes' port, the API on the Service's target port, over TLS.
func (d *deployEnv) runBinary(t *testing.T, m *deployManifests) {
	ctx := t.Context()
	c := m.container(t)
	run := d.containerRun(t, m)
	ready, live := c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet
	readyPort := m.containerPort(t, "readinessProbe", ready.Port)
	livePort := m.containerPort(t, "livenessProbe", live.Port)
	apiPort := m.containerPort(t, "Service port api", m.servicePort(t, "api").TargetPort)
	for _, port := range []int{readyPort, livePort, apiPort} {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("port %d, which deploy/ names, is taken on this machine (%v): the test runs the binary on the manifest's own ports so that they cannot drift; free it and run again", port, err)
		}
		ln.Close()
	}

	sa := m.serviceAccount.Name
	user, err := d.c.UserConfig("system:serviceaccount:"+d.ns+":"+sa, "system:serviceaccounts", "system:serviceaccounts:"+d.ns, "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	env := append(slices.Clone(run.env), "KUBECONFIG="+kubeconfigFor(t, user))
	p := startProc(t, "spawnkit-service", env, run.args...)

	probeURL := func(port int, g *corev1.HTTPGetAction) string {
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		return fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, port, g.Path)
	}
	probes := httpClient(nil)
	for _, pr := range []struct {
		what string
		url  string
	}{{"liveness", probeURL(livePort, live)}, {"readiness", probeURL(readyPort, ready)}} {
		testutil.EventuallyEvery(t, poll, deployTimeout, pr.what+" probe "+pr.url+" to answer 200", func() error {
			select {
			case <-p.done:
				t.Fatalf("spawnkit-service exited (%v):\n%s", p.err, p.out.String())
			default:
			}
			code, body := get(ctx, probes, pr.url, "")
			return pending(code == http.StatusOK, fmt.Sprintf("%d %s", code, body))
		})
	}
	if code, body := get(ctx, probes, fmt.Sprintf("http://127.0.0.1:%d/metrics", readyPort), ""); code != http.StatusOK || !strings.Contains(body, "spawnkit_manager_") {
		t.Errorf("/metrics on the probe port: %d, %.200s", code, body)
	}

	// The API, as a hub reaches it through the Service: TLS for the
	// Service's name, verified against the test's CA, and the token.
	api := httpClient(&tls.Config{RootCAs: d.ca, ServerName: m.service.Name + "." + d.ns + ".svc", MinVersion: tls.VersionTLS12})
	base := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if code, body := get(ctx, api, base+"/v1/servers", d.token); code != http.StatusOK {
		t.Errorf("GET /v1/servers with the token over TLS: %d %s", code, body)
	}
	if code, _ := get(ctx, api, base+"/v1/servers", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/servers without the token: %d, want 401", code)
	}
	if code, body := get(ctx, httpClient(nil), fmt.Sprintf("http://127.0.0.1:%d/v1/servers", apiPort), d.token); code == http.StatusOK {
		t.Errorf("the API answered plain HTTP: %s", body)
	}

	// The Lease is in the pod's namespace, held under the pod's name: the
	// Downward API env reached the flags' defaults.
	lease, err := d.c.Client.CoordinationV1().Leases(d.ns).Get(ctx, "spawnkit-service", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Lease: %v", err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != run.podName {
		t.Errorf("Lease holder %v, want the pod's name %q", h, run.podName)
	}
	if lines := p.lines("WARNING"); len(lines) > 0 {
		t.Errorf("the service warned: %q", lines)
	}
}

func deployPtr[T any](v T) *T { return &v }
