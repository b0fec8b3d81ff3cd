package service

// Least privilege, proven (issue 26 item 5): the binary runs as a user
// that has nothing but deploy/role.yaml's Roles (or those Roles with one
// verb taken away) in its namespace, on the simulated cluster's
// RBAC-enforcing API server.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/spawner"
)

// rbacTimeout bounds each wait of these tests.
const rbacTimeout = 60 * time.Second

// rbacToken is the API token of every service these tests run.
const rbacToken = "rbac-test-token"

// rbacHubToken is the JupyterHub API token every start passes in its
// env: it goes into the server's environment Secret.
const rbacHubToken = "rbac-hub-token-6d0f3b9e2a71c458"

// shippedRoles are the Roles of deploy/role.yaml, decoded as kubectl
// applies them: the service's Role first, then the leader election's.
func shippedRoles(t *testing.T) []rbacv1.Role {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var roles []rbacv1.Role
	for {
		var r rbacv1.Role
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/role.yaml: %v", err)
		}
		if r.Kind != "Role" || r.APIVersion != rbacv1.SchemeGroupVersion.String() {
			t.Fatalf("deploy/role.yaml has a %s %s; want only %s Roles", r.APIVersion, r.Kind, rbacv1.SchemeGroupVersion)
		}
		roles = append(roles, r)
	}
	if len(roles) != 2 || roles[0].Name != "spawnkit-service" || roles[1].Name != "spawnkit-service-leader-election" {
		t.Fatalf("deploy/role.yaml: want the Roles spawnkit-service and spawnkit-service-leader-election, in that order; have %d", len(roles))
	}
	return roles
}

// grant is one verb on one resource, as an RBAC rule grants it.
type grant struct{ group, resource, verb string }

func (g grant) String() string {
	if g.group == "" {
		return g.verb + " " + g.resource
	}
	return g.verb + " " + g.resource + "." + g.group
}

// grants lists every (group, resource, verb) that roles grant, in the
// order the rules name them.
func grants(roles []rbacv1.Role) []grant {
	var out []grant
	for _, r := range roles {
		for _, rule := range r.Rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						out = append(out, grant{g, res, v})
					}
				}
			}
		}
	}
	return out
}

// without returns deep copies of roles in which nothing grants g: the
// rule that names g's resource is split so that its other resources keep
// every verb.
func without(roles []rbacv1.Role, g grant) []rbacv1.Role {
	out := make([]rbacv1.Role, len(roles))
	for i, r := range roles {
		r = *r.DeepCopy()
		var rules []rbacv1.PolicyRule
		for _, rule := range r.Rules {
			if !slices.Contains(rule.APIGroups, g.group) || !slices.Contains(rule.Resources, g.resource) || !slices.Contains(rule.Verbs, g.verb) {
				rules = append(rules, rule)
				continue
			}
			if others := slices.DeleteFunc(slices.Clone(rule.Resources), func(s string) bool { return s == g.resource }); len(others) > 0 {
				rest := *rule.DeepCopy()
				rest.Resources = others
				rules = append(rules, rest)
			}
			if verbs := slices.DeleteFunc(slices.Clone(rule.Verbs), func(s string) bool { return s == g.verb }); len(verbs) > 0 {
				one := *rule.DeepCopy()
				one.Resources, one.Verbs = []string{g.resource}, verbs
				rules = append(rules, one)
			}
		}
		r.Rules = rules
		out[i] = r
	}
	return out
}

// rbacEnv is one test's namespace and a user that has exactly roles in
// it, and nothing anywhere else.
type rbacEnv struct {
	ns, user   string
	roles      []rbacv1.Role
	rest       *rest.Config // the user's
	kubeconfig string       // the user's
	configFile string
	tokenFile  string
	// userNamespaces is set by bindUserNamespacesClusterRole.
	userNamespaces bool
	// alice and bob are the env's users, of its own names: with user
	// namespaces the service watches pods everywhere, and must not meet
	// another test's alice.
	alice, bob string
}

// newRBACEnv makes a namespace, creates roles in it bound to a new user,
// waits until the API server's authorizer grants exactly what they say,
// and writes the configuration config (a format string taking the
// namespace as %[1]s).
func newRBACEnv(t *testing.T, roles []rbacv1.Role, config string) *rbacEnv {
	t.Helper()
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rbac-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &rbacEnv{ns: ns.Name, user: "spawnkit-" + ns.Name, roles: roles}
	suffix := strings.TrimPrefix(ns.Name, "rbac-")
	e.alice, e.bob = "alice-"+suffix, "bob-"+suffix
	for _, r := range roles {
		r.Namespace = e.ns
		if _, err := c.Client.RbacV1().Roles(e.ns).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: e.user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	granted := grants(roles)
	for _, g := range grants(shippedRoles(t)) {
		waitAllowed(t, e.user, e.ns, g, slices.Contains(granted, g))
	}
	if e.rest, err = c.UserConfig(e.user); err != nil {
		t.Fatal(err)
	}
	e.kubeconfig = kubeconfigFor(t, e.rest)
	dir := t.TempDir()
	e.configFile, e.tokenFile = filepath.Join(dir, "config.yaml"), filepath.Join(dir, "token")
	if err := os.WriteFile(e.configFile, []byte(fmt.Sprintf(config, e.ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.tokenFile, []byte(rbacToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// waitAllowed waits until the API server's authorizer, which learns of
// RBAC changes through an informer, says whether user may do g in ns.
func waitAllowed(t *testing.T, user, ns string, g grant, allowed bool) {
	t.Helper()
	testutil.EventuallyEvery(t, poll, 30*time.Second, fmt.Sprintf("%s to be allowed=%v %s in %s", user, allowed, g, ns), func() error {
		review, err := cluster.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: g.verb, Group: g.group, Resource: g.resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		return pending(review.Status.Allowed == allowed, fmt.Sprintf("allowed=%v (%s)", review.Status.Allowed, review.Status.Reason))
	})
}

// forbidden is the part of the API server's Forbidden message that names
// the verb, the resource and the namespace.
func (e *rbacEnv) forbidden(g grant) string {
	return fmt.Sprintf("cannot %s resource %q in API group %q in the namespace %q", g.verb, g.resource, g.group, e.ns)
}

// rbacService is one run of the binary in an rbacEnv.
type rbacService struct {
	*proc
	api, probes string // base URLs
}

// start runs the binary with the user's kubeconfig (or kubeconfig, when
// not ""), the env's configuration and token, and extra flags.
func (e *rbacEnv) start(t *testing.T, name, kubeconfig string, env []string, extra ...string) *rbacService {
	t.Helper()
	if kubeconfig == "" {
		kubeconfig = e.kubeconfig
	}
	api, probes := freeAddr(t), freeAddr(t)
	args := append([]string{"-kubeconfig", kubeconfig, "-config", e.configFile, "-token-file", e.tokenFile,
		"-listen", api, "-probe-listen", probes}, extra...)
	return &rbacService{proc: startProc(t, name, env, args...), api: "http://" + api, probes: "http://" + probes}
}

// call makes one API request with the token and returns the code and
// body.
func (s *rbacService) call(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), rbacTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.api+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+rbacToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient(nil).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, string(data)
}

// forbiddenLines are the process's output lines saying forbidden.
func (s *rbacService) forbiddenLines() []string {
	var out []string
	for _, l := range strings.Split(s.out.String(), "\n") {
		if strings.Contains(strings.ToLower(l), "forbidden") {
			out = append(out, l)
		}
	}
	return out
}

// apiRecorder is a loopback reverse proxy to the API server that carries
// a user's identity (its client certificate) and records every request
// it forwards. Safe for concurrent use.
type apiRecorder struct {
	url string // plain HTTP, no authentication
	mu  sync.Mutex
	log []apiRequest // guarded by mu
}

// apiRequest is one request the recorder forwarded.
type apiRequest struct {
	method, path string
	query        url.Values
}

func (r apiRequest) String() string {
	if len(r.query) == 0 {
		return r.method + " " + r.path
	}
	return r.method + " " + r.path + "?" + r.query.Encode()
}

// verb is the RBAC verb the API server authorises the request as.
func (r apiRequest) verb(collection bool) string {
	switch r.method {
	case http.MethodGet:
		switch {
		case r.query.Get("watch") == "true" || r.query.Get("watch") == "1":
			return "watch"
		case collection:
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if collection {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(r.method)
}

func startAPIRecorder(t *testing.T, cfg *rest.Config) *apiRecorder {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &apiRecorder{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rec.mu.Lock()
			rec.log = append(rec.log, apiRequest{method: pr.In.Method, path: pr.In.URL.Path, query: pr.In.URL.Query()})
			rec.mu.Unlock()
			pr.SetURL(target)
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	rec.url = srv.URL
	return rec
}

// requests returns what the recorder has forwarded so far.
func (r *apiRecorder) requests() []apiRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// kubeconfig writes a kubeconfig file that reaches the API server
// through the recorder, without credentials of its own.
func (r *apiRecorder) kubeconfig(t *testing.T) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: r.url}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	file := filepath.Join(t.TempDir(), "kubeconfig-proxy")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// podGone reports whether the admin sees no pod ns/name.
func podGone(t *testing.T, ns, name string) (bool, string) {
	p, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, ""
	}
	if err != nil {
		return false, err.Error()
	}
	return false, fmt.Sprintf("pod %s phase %s deleting %v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
}

// rbacConfig is the service configuration of the RBAC tests: every
// object kind the service makes (pod, claim, Service). %[1]s is the
// namespace.
const rbacConfig = `namespace: %[1]s
image: quay.io/jupyter/base-notebook:2024-01-01
start_timeout: 20
storage_pvc_ensure: true
storage_capacity: 1Gi
services_enabled: true
`

// rbacUserNamespacesConfig is rbacConfig with a namespace per user. Its
// pods carry a component label of the test's own: the service then
// watches pods in every namespace, and must not meet the pods other
// tests leave behind.
const rbacUserNamespacesConfig = rbacConfig + `enable_user_namespaces: true
user_namespace_template: "%[1]s-{username}"
component_label: "singleuser-%[1]s"
network_policy:
  enabled: true
user_namespace_resource_quota:
  limits.memory: 8Gi
mem_limit: 1G
`

// The leader election of the RBAC tests: short, so that a replica that
// cannot renew loses its term within readyStable.
var rbacElection = []string{"-leader-elect", "-leader-elect-identity", "a",
	"-leader-elect-lease-duration", "4s", "-leader-elect-renew-deadline", "3s", "-leader-elect-retry-period", "500ms"}

// readyStable is how long a replica must stay ready: longer than the
// renew deadline, so that a term that cannot be renewed ends within it.
const readyStable = 4 * time.Second

// z2jhHubRoles is the Role the Zero to JupyterHub chart gives its hub
// (jupyterhub/templates/hub/rbac.yaml), with the shipped Lease Role
// beside it.
func z2jhHubRoles(t *testing.T) []rbacv1.Role {
	return []rbacv1.Role{{
		ObjectMeta: metav1.ObjectMeta{Name: "hub"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "persistentvolumeclaims", "secrets", "services"},
				Verbs: []string{"get", "watch", "list", "create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "watch", "list"}},
		},
	}, shippedRoles(t)[1]}
}

// outcome is how one step of the scenario went: ok, or what it saw
// instead (the API's answers and progress messages, decoded).
type outcome struct {
	ok   bool
	text string
}

func failed(format string, a ...any) outcome { return outcome{text: fmt.Sprintf(format, a...)} }

// rbacStep is one documented operation of the scenario.
type rbacStep struct {
	name string
	run  func(t *testing.T, e *rbacEnv, s *rbacService) outcome
}

// scenario is every operation of the service that calls the API server,
// in an order where each needs only what the ones before it made: a
// start makes the pod, claim and Service; a second start of the same
// server reuses the claim; a stale Service of the same server is
// replaced; stop, and DeleteForever deletes the claim.
var scenario = []rbacStep{
	{"ready", stepReady},
	{"start", func(t *testing.T, e *rbacEnv, s *rbacService) outcome { return stepStart(t, e, s, e.alice, "") }},
	{"stop", func(t *testing.T, e *rbacEnv, s *rbacService) outcome { return stepStop(t, e, s, e.alice) }},
	{"start again", func(t *testing.T, e *rbacEnv, s *rbacService) outcome { return stepStart(t, e, s, e.alice, "") }},
	{"start named", func(t *testing.T, e *rbacEnv, s *rbacService) outcome { return stepStart(t, e, s, e.alice, "two") }},
	{"replace stale objects", stepStaleObjects},
	{"stop again", func(t *testing.T, e *rbacEnv, s *rbacService) outcome { return stepStop(t, e, s, e.alice) }},
	{"delete forever", stepForever},
}

// stepReady: /readyz answers 200 and keeps doing so for readyStable; a
// body that says forbidden ends it at once.
func stepReady(t *testing.T, _ *rbacEnv, s *rbacService) outcome {
	client := httpClient(nil)
	var since time.Time
	var code int
	var body string
	var end *outcome
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, rbacTimeout, true, func(context.Context) (bool, error) {
		select {
		case <-s.done:
			end = &outcome{text: fmt.Sprintf("exited: %v\n%s", s.err, s.out.String())}
			return true, nil
		default:
		}
		code, body = get(t.Context(), client, s.probes+"/readyz", "")
		switch {
		case strings.Contains(body, "forbidden"):
			end = &outcome{text: fmt.Sprintf("/readyz %d: %s", code, body)}
			return true, nil
		case code != http.StatusOK:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= readyStable:
			end = &outcome{ok: true}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return failed("/readyz %d after %s: %s", code, rbacTimeout, body)
	}
	return *end
}

// namedServerPath is the API path of user's server name ("" the default).
func namedServerPath(user, name string) string {
	if name == "" {
		return "/v1/users/" + user + "/server"
	}
	return "/v1/users/" + user + "/servers/" + name
}

// apiText is an API answer as a person reads it: an error body's
// message, or the body.
func apiText(code int, body string) string {
	var e struct{ Error, Reason string }
	if json.Unmarshal([]byte(body), &e) == nil && e.Error != "" {
		return fmt.Sprintf("%d %s: %s", code, e.Reason, e.Error)
	}
	return fmt.Sprintf("%d %s", code, body)
}

// stepStart starts a server and follows its progress to the end: ok
// when it is ready and no message says its events cannot be shown.
func stepStart(t *testing.T, _ *rbacEnv, s *rbacService, user, name string) outcome {
	path := namedServerPath(user, name)
	if code, body := s.call(t, http.MethodPost, path, `{"env": {"JUPYTERHUB_API_TOKEN": "`+rbacHubToken+`"}}`); code != http.StatusAccepted {
		return failed("POST %s: %s", path, apiText(code, body))
	}
	final, messages := s.progressAll(t, path)
	text := strings.Join(messages, "\n")
	if final != "ready" || strings.Contains(text, "cannot be shown") {
		return failed("start of %s ended %s:\n%s", path, final, text)
	}
	return outcome{ok: true, text: text}
}

// stepStop stops a server: ok when the API says stopped and its pod is
// gone.
func stepStop(t *testing.T, e *rbacEnv, s *rbacService, user string) outcome {
	path := namedServerPath(user, "")
	code, body := s.call(t, http.MethodDelete, path, "")
	if code != http.StatusOK {
		return failed("DELETE %s: %s", path, apiText(code, body))
	}
	var st struct {
		Phase string
		State struct {
			Namespace string `json:"namespace"`
			PodName   string `json:"pod_name"`
		}
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Phase != "stopped" {
		return failed("DELETE %s: %s", path, body)
	}
	testutil.EventuallyEvery(t, poll, rbacTimeout, "pod "+st.State.PodName+" gone", func() error { return pending(podGone(t, st.State.Namespace, st.State.PodName)) })
	return outcome{ok: true}
}

// stepStaleObjects plants a pod (KubeSpawner's, left from before a
// migration), a Service and an environment Secret named as bob's
// server's, annotated as his, the last two owned by no pod (a garbage
// collection not yet done): bob's start must replace all three, the
// Service and Secret with ones owned by his new pod.
func stepStaleObjects(t *testing.T, e *rbacEnv, s *rbacService) outcome {
	ns, pod := e.serverNamespace(e.bob), "jupyter-"+e.bob
	owner := metav1.ObjectMeta{Name: pod, Annotations: map[string]string{
		"hub.jupyter.org/username": e.bob, "hub.jupyter.org/servername": ""}}
	stale, err := cluster.Client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: owner.Annotations,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "kubespawner"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "quay.io/jupyter/base-notebook:2024-01-01"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: owner, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8888}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owner.Name = spawner.EnvSecretName(pod)
	if _, err := cluster.Client.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: owner, StringData: map[string]string{"JUPYTERHUB_API_TOKEN": "stale"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if o := stepStart(t, e, s, e.bob, ""); !o.ok {
		return o
	}
	if p, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{}); err != nil || p.UID == stale.UID {
		return failed("pod %s/%s after %s's start: %v (the stale one kept: %v)", ns, pod, e.bob, err, err == nil)
	}
	svc, err := cluster.Client.CoreV1().Services(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		return failed("Service %s/%s: %v", ns, pod, err)
	}
	sec, err := cluster.Client.CoreV1().Secrets(ns).Get(t.Context(), spawner.EnvSecretName(pod), metav1.GetOptions{})
	if err != nil {
		return failed("Secret %s/%s: %v", ns, spawner.EnvSecretName(pod), err)
	}
	for _, refs := range [][]metav1.OwnerReference{svc.OwnerReferences, sec.OwnerReferences} {
		if len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].Name != pod {
			return failed("after %s's start, his Service and Secret are owned by %v and %v, want his pod", e.bob, svc.OwnerReferences, sec.OwnerReferences)
		}
	}
	return outcome{ok: true}
}

// stepForever deletes alice's default server forever: 204, and her claim
// is deleted (gone, or held only by its protection finalizer).
func stepForever(t *testing.T, e *rbacEnv, s *rbacService) outcome {
	path := namedServerPath(e.alice, "") + "?forever=true"
	if code, body := s.call(t, http.MethodDelete, path, ""); code != http.StatusNoContent {
		return failed("DELETE %s: %s", path, apiText(code, body))
	}
	ns, claim := e.serverNamespace(e.alice), "claim-"+e.alice
	c, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err == nil && c.DeletionTimestamp == nil {
		return failed("claim %s/%s is still there after DeleteForever", ns, claim)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return outcome{ok: true}
}

// serverNamespace is where the env's configuration puts user's servers.
func (e *rbacEnv) serverNamespace(user string) string {
	if e.userNamespaces {
		return e.ns + "-" + user
	}
	return e.ns
}

// progressAll reads a server's progress stream to its final event and
// returns that event's name and every message, decoded.
func (s *rbacService) progressAll(t *testing.T, path string) (string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), rbacTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.api+path+"/progress", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+rbacToken)
	resp, err := httpClient(nil).Do(req)
	if err != nil {
		t.Fatalf("progress of %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return "", []string{apiText(resp.StatusCode, string(data))}
	}
	var messages []string
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d struct{ Message string }
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d)
			messages = append(messages, d.Message)
			if event != "progress" {
				return event, messages
			}
		}
	}
	return "ended without a final event: " + fmt.Sprint(sc.Err()), messages
}

// runScenario runs the scenario's steps in order until one fails, and
// returns the name of the failed step ("" when all passed) and what it
// saw.
func runScenario(t *testing.T, e *rbacEnv, s *rbacService) (string, string) {
	t.Helper()
	for _, step := range scenario {
		if o := step.run(t, e, s); !o.ok {
			return step.name, o.text
		}
	}
	return "", ""
}

// TestRBACShippedRolesSuffice: under exactly deploy/role.yaml's Roles,
// under the z2jh hub's Role, and with user namespaces under the shipped
// Lease Role and the user-namespaces ClusterRole, every operation works
// with -leader-elect, nothing is refused (no "forbidden" in the log),
// and every request the service makes is one the Roles grant, in the
// namespaces they are bound in (no cluster-wide list with one namespace
// configured).
func TestRBACShippedRolesSuffice(t *testing.T) {
	cases := []struct {
		name           string
		roles          func(t *testing.T) []rbacv1.Role
		userNamespaces bool
	}{
		{"deploy/role.yaml", shippedRoles, false},
		{"z2jh hub Role", z2jhHubRoles, false},
		{"user namespaces", func(t *testing.T) []rbacv1.Role { return shippedRoles(t)[1:] }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			config := rbacConfig
			if c.userNamespaces {
				config = rbacUserNamespacesConfig
			}
			e := newRBACEnv(t, c.roles(t), config)
			var clusterRole *rbacv1.ClusterRole
			if c.userNamespaces {
				clusterRole = e.bindUserNamespacesClusterRole(t)
			}
			rec := startAPIRecorder(t, e.rest)
			s := e.start(t, "svc", rec.kubeconfig(t), nil, append([]string{"-leader-elect-namespace", e.ns}, rbacElection...)...)
			if step, text := runScenario(t, e, s); step != "" {
				t.Fatalf("step %q failed:\n%s\n\nlog:\n%s", step, text, s.out.String())
			}
			if lines := s.forbiddenLines(); len(lines) > 0 {
				t.Errorf("refused requests in the log:\n%s", strings.Join(lines, "\n"))
			}
			if strings.Contains(s.out.String(), rbacHubToken) {
				t.Error("the hub's API token is in the service's log")
			}
			e.checkRequests(t, rec.requests(), clusterRole)
		})
	}
}

// checkRequests checks that every request is granted by the shipped
// Roles in e.ns, or, with user namespaces, by clusterRole anywhere, and
// logs what was asked.
func (e *rbacEnv) checkRequests(t *testing.T, reqs []apiRequest, clusterRole *rbacv1.ClusterRole) {
	t.Helper()
	namespaced := grants(shippedRoles(t))
	var cluster []grant
	if clusterRole != nil {
		cluster = grants([]rbacv1.Role{{Rules: clusterRole.Rules}})
	}
	seen := map[string]int{}
	for _, r := range reqs {
		g, ns, ok := r.grant()
		if !ok {
			// Discovery and /version: no RBAC rule of a Role applies.
			if !strings.HasPrefix(r.path, "/version") && !strings.HasPrefix(r.path, "/api") {
				t.Errorf("%s: neither a resource nor discovery", r)
			}
			continue
		}
		where := "namespace " + ns
		switch {
		case ns == "" && slices.Contains(cluster, g):
			where = "cluster-wide"
		case ns == e.ns && slices.Contains(namespaced, g):
		case ns != "" && strings.HasPrefix(ns, e.ns+"-") && slices.Contains(cluster, g):
			where = "user namespace"
		default:
			t.Errorf("%s (%s in %q) is granted by no shipped Role", r, g, ns)
		}
		seen[g.String()+" ("+where+")"]++
	}
	lines := make([]string, 0, len(seen))
	for k, n := range seen {
		lines = append(lines, fmt.Sprintf("%s ×%d", k, n))
	}
	slices.Sort(lines)
	t.Logf("requests the service made:\n%s", strings.Join(lines, "\n"))
}

// grant is the RBAC verb and resource a request is authorised as, and its
// namespace ("" cluster-wide); ok is false for non-resource requests.
func (r apiRequest) grant() (grant, string, bool) {
	parts := strings.Split(strings.Trim(r.path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:] // api/v1
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:] // apis/<group>/<version>
	default:
		return grant{}, "", false
	}
	ns := ""
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 2 {
		return grant{}, "", false
	}
	return grant{group, parts[0], r.verb(len(parts) == 1)}, ns, true
}

// bindUserNamespacesClusterRole creates deploy/user-namespaces'
// ClusterRole under a name of this test, binds it to the env's user and
// removes both (and the user namespaces) when the test ends.
func (e *rbacEnv) bindUserNamespacesClusterRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	e.userNamespaces = true
	data, err := os.ReadFile(filepath.Join(deployDir, "user-namespaces", "clusterrole.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&cr); err != nil {
		t.Fatal(err)
	}
	cr.Name = "spawnkit-" + e.ns
	ctx := context.WithoutCancel(t.Context())
	client := cluster.Client
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: e.user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(ctx, cr.Name, metav1.DeleteOptions{})
		_ = client.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{})
		for _, u := range []string{e.alice, e.bob} {
			_ = client.CoreV1().Namespaces().Delete(ctx, e.serverNamespace(u), metav1.DeleteOptions{})
		}
	})
	for _, g := range grants([]rbacv1.Role{{Rules: cr.Rules}}) {
		waitAllowed(t, e.user, "", g, true)
	}
	// The stale Service step plants into bob's namespace before his
	// first start would make it.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.serverNamespace(e.bob)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &cr
}

// TestRBACEveryVerbIsNeeded takes each verb of the shipped Roles away in
// turn: the scenario then fails at the operation that needs it, with an
// answer (API error, progress message or /readyz) that names the verb,
// the resource and the namespace, and every operation before it still
// works. So the shipped Role is minimal, and a cluster whose Role lacks
// a verb says which.
func TestRBACEveryVerbIsNeeded(t *testing.T) {
	// Where each verb is needed. List is asked only when a list is not
	// streamed (client-go's WatchList, on by default against servers that
	// serve it, falls back to a list otherwise): those cases run the
	// client with streaming lists off, as against such a server.
	needs := map[grant]struct {
		step     string
		noStream bool
	}{
		// A stop reads the pod's owner from the cache; a start that
		// finds a pod of its name reads it to see whose it is.
		{"", "pods", "get"}:    {"replace stale objects", false},
		{"", "pods", "list"}:   {"ready", true},
		{"", "pods", "watch"}:  {"ready", false},
		{"", "pods", "create"}: {"start", false},
		{"", "pods", "delete"}: {"stop", false},
		// The env's users have names KubeSpawner's pre-7 scheme escapes
		// differently ("-"): the first start looks for a claim under that
		// name (handle_legacy_names).
		{"", "persistentvolumeclaims", "get"}:       {"start", false},
		{"", "persistentvolumeclaims", "create"}:    {"start", false},
		{"", "persistentvolumeclaims", "delete"}:    {"delete forever", false},
		{"", "services", "get"}:                     {"replace stale objects", false},
		{"", "services", "create"}:                  {"start", false},
		{"", "services", "delete"}:                  {"replace stale objects", false},
		{"", "secrets", "create"}:                   {"ready", false}, // /readyz's namespace check (a dry-run create)
		{"", "secrets", "get"}:                      {"replace stale objects", false},
		{"", "secrets", "delete"}:                   {"replace stale objects", false},
		{"", "events", "list"}:                      {"start", true},
		{"", "events", "watch"}:                     {"start", false},
		{"coordination.k8s.io", "leases", "get"}:    {"ready", false},
		{"coordination.k8s.io", "leases", "create"}: {"ready", false},
		{"coordination.k8s.io", "leases", "update"}: {"ready", false},
	}
	roles := shippedRoles(t)
	all := grants(roles)
	for _, g := range all {
		if _, ok := needs[g]; !ok {
			t.Errorf("deploy/role.yaml grants %s, which no case of this test takes away", g)
		}
	}
	for g := range needs {
		if !slices.Contains(all, g) {
			t.Errorf("this test expects deploy/role.yaml to grant %s; it does not", g)
		}
	}
	for _, g := range all {
		need := needs[g]
		t.Run(g.String(), func(t *testing.T) {
			t.Parallel()
			e := newRBACEnv(t, without(roles, g), rbacConfig)
			var env []string
			if need.noStream {
				env = append(env, "KUBE_FEATURE_WatchListClient=false")
			}
			s := e.start(t, "svc", "", env, append([]string{"-leader-elect-namespace", e.ns}, rbacElection...)...)
			step, text := runScenario(t, e, s)
			if step != need.step {
				t.Fatalf("without %s the scenario failed at step %q, want %q:\n%s\n\nlog:\n%s", g, step, need.step, text, s.out.String())
			}
			if want := e.forbidden(g); !strings.Contains(text, want) {
				t.Fatalf("without %s, step %q failed saying\n%s\nwhich does not contain %s", g, step, text, want)
			}
			t.Logf("without %s: %s fails: %s", g, step, firstLine(text, e.forbidden(g)))
		})
	}
}

// firstLine is the first line of text that contains s.
func firstLine(text, s string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
