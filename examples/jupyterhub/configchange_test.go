package jupyterhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

// TestJupyterHubConfigChange: the operator changes the spawner-service's
// configuration while servers run and restarts the service (issue 42):
// pod_name_template; namespace, the old one listed in retired_namespaces;
// the cluster holding the servers marked retired in the -clusters file.
// Through the real JupyterHub and the Python Spawner, each time:
//
//   - after the service's restart, and again after JupyterHub's (whose
//     spawners then know the servers only from its database, and send
//     that state to the service before their first poll), every server
//     is still ready in JupyterHub, none is recorded stopped, each still
//     answers through the proxy from its own pod, and no second pod
//     exists anywhere;
//   - a stop through JupyterHub removes the old pod, and the next start
//     makes one under the new configuration (its name, its namespace,
//     another cluster).
func TestJupyterHubConfigChange(t *testing.T) {
	tl := requireTools(t)
	a := testcluster.Require(t, cluster)
	t.Run("PodNameTemplate", func(t *testing.T) {
		// With pvc_name_template changed too: the server's next start
		// mounts the claim it had (JupyterHub keeps its name across the
		// stop, and sends it with the start), and makes none under the
		// new name.
		dir := t.TempDir()
		before, after := filepath.Join(dir, "before.yaml"), filepath.Join(dir, "after.yaml")
		writeServiceConfig(t, before, func(cfg map[string]any) { cfg["pod_name_template"] = "jupyter-{user_server}" })
		writeServiceConfig(t, after, func(cfg map[string]any) {
			cfg["pod_name_template"] = "nb-{user_server}"
			cfg["pvc_name_template"] = "home-{user_server}"
		})
		testConfigChange(t, tl, configChange{
			users:       [2]string{"nora", "otto"},
			profile:     "storage",
			nextProfile: "storage",
			claim:       func(user string) string { return "claim-" + user },
			places:      []place{{"", a}},
			before:      stackOptions{serviceConfig: before},
			after:       stackOptions{serviceConfig: after},
			old:         func(user string, p serverPod) error { return wantPodName(p, "jupyter-"+user) },
			next:        func(user string, p serverPod) error { return wantPodName(p, "nb-"+user) },
		})
	})
	t.Run("Namespace", func(t *testing.T) {
		const moved = "config-change-new"
		createNamespace(t, a, moved)
		dir := t.TempDir()
		before, after := filepath.Join(dir, "before.yaml"), filepath.Join(dir, "after.yaml")
		writeServiceConfig(t, before, nil)
		writeServiceConfig(t, after, func(cfg map[string]any) {
			cfg["namespace"] = moved
			cfg["retired_namespaces"] = []any{namespace}
		})
		testConfigChange(t, tl, configChange{
			users:  [2]string{"pia", "quinn"},
			places: []place{{"", a}},
			before: stackOptions{serviceConfig: before},
			after:  stackOptions{serviceConfig: after},
			old:    func(_ string, p serverPod) error { return wantNamespace(p, namespace) },
			next:   func(_ string, p serverPod) error { return wantNamespace(p, moved) },
		})
	})
	t.Run("NamespaceNotRetiredYet", func(t *testing.T) { testNamespaceNotRetiredYet(t, tl, a) })
	t.Run("RetiredCluster", func(t *testing.T) {
		b := testcluster.StartSecond(t, a, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1, Responders: true})
		dir := t.TempDir()
		// Before: profile remote places servers in b. After: b is
		// retired, and no profile names it any more (a retired cluster
		// takes no start: the service refuses a profile naming one).
		before, after := filepath.Join(dir, "before.yaml"), filepath.Join(dir, "after.yaml")
		writeRemoteProfile(t, before)
		writeServiceConfig(t, after, nil)
		clustersBefore, clustersAfter := filepath.Join(dir, "clusters-before.yaml"), filepath.Join(dir, "clusters-after.yaml")
		writeFile(t, clustersBefore, fmt.Sprintf("clusters:\n- name: a\n  kubeconfig: %s\n- name: b\n  kubeconfig: %s\n", a.Kubeconfig, b.Kubeconfig))
		writeFile(t, clustersAfter, fmt.Sprintf("clusters:\n- name: a\n  kubeconfig: %s\n- name: b\n  kubeconfig: %s\n  retired: true\n", a.Kubeconfig, b.Kubeconfig))
		testConfigChange(t, tl, configChange{
			users:   [2]string{"rosa", "sam"},
			profile: "remote",
			places:  []place{{"a", a}, {"b", b}},
			before:  stackOptions{serviceConfig: before, clusters: clustersBefore},
			after:   stackOptions{serviceConfig: after, clusters: clustersAfter},
			old:     func(_ string, p serverPod) error { return wantCluster(p, "b") },
			next:    func(_ string, p serverPod) error { return wantCluster(p, "a") },
		})
	})
}

// configChange is one of TestJupyterHubConfigChange's cases.
type configChange struct {
	// users[0] is stopped and started again under the new
	// configuration; users[1] runs on until the end, then is stopped.
	users [2]string
	// profile is the profile of the first starts, nextProfile of the
	// start after the change (default: "default").
	profile, nextProfile string
	// claim, when set, is the claim of the user's first start (the
	// hub's state names it), kept for the start after the change.
	claim func(user string) string
	// places are the clusters the servers may be in: each is searched in
	// every namespace; the first is the stack's.
	places []place
	// before and after are the service's configuration (and -clusters)
	// before and after the change.
	before, after stackOptions
	// old checks a pod of the first starts, next the pod of the start
	// under the new configuration.
	old, next func(user string, p serverPod) error
}

// place is a cluster the test looks for pods in; name is its name in
// the -clusters file ("" with none).
type place struct {
	name string
	c    *testcluster.Cluster
}

// serverPod is a pod of a user's default server and the cluster it is in.
type serverPod struct {
	cluster string
	pod     corev1.Pod
}

func (p serverPod) String() string {
	return fmt.Sprintf("%s/%s (cluster %q)", p.pod.Namespace, p.pod.Name, p.cluster)
}

func testConfigChange(t *testing.T, tl tools, tc configChange) {
	ctx := t.Context()
	if tc.profile == "" {
		tc.profile = "default"
	}
	if tc.nextProfile == "" {
		tc.nextProfile = "default"
	}
	s := newStack(t, tl, tc.places[0].c, tc.before)
	users := tc.users[:]
	// Runs before the stack stops: whatever happens, no pod of these
	// users is left for the tests after this one (they share the
	// cluster, and its namespace).
	t.Cleanup(func() {
		deletePodsEverywhere(t, tc.places, users)
		deleteClaimsEverywhere(t, tc.places, users)
	})
	running := make([][2]string, len(users))
	for i, u := range users {
		s.createUser(ctx, t, u)
		s.startServer(ctx, t, u, "", map[string]string{"profile": tc.profile})
		running[i] = [2]string{u, ""}
	}
	old := map[string]serverPod{}
	for _, u := range users {
		s.waitServer(ctx, t, u, "", 90*time.Second, "ready", ready)
		p := onePodEverywhere(ctx, t, tc.places, u)
		if err := tc.old(u, p); err != nil {
			t.Fatalf("%s's pod before the change: %v", u, err)
		}
		old[u] = p
		all, err := s.servers(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if got := stateField(all[""].State, "pod_name"); got != p.pod.Name {
			t.Fatalf("JupyterHub's state of %s's server names pod %q, want %q: %v", u, got, p.pod.Name, all[""].State)
		}
		if tc.claim != nil {
			if got := stateField(all[""].State, "pvc_name"); got != tc.claim(u) {
				t.Fatalf("JupyterHub's state of %s's server names claim %q, want %q: %v", u, got, tc.claim(u), all[""].State)
			}
		}
	}

	// The service restarts under the new configuration. JupyterHub polls
	// every second; any poll the new service answered 404 (or any
	// answer a Spawner read as an exit status) would end a server.
	s.opts.serviceConfig, s.opts.clusters = tc.after.serviceConfig, tc.after.clusters
	s.restartService(ctx, t)
	s.waitPolls(t, running, 3)
	checkServersKept(t, s, tc.places, old, "after the service restarted under the new configuration")

	// JupyterHub restarts: its Spawners have only the state in its
	// database, and send it (PUT .../state) before their first poll.
	sent := map[string]int{}
	for _, u := range users {
		sent[u] = s.stateSent(u)
	}
	s.restartHub(ctx, t)
	s.waitPolls(t, running, 3)
	for _, u := range users {
		if s.stateSent(u) == sent[u] {
			t.Errorf("JupyterHub restarted, but its Spawner never gave the service %s's state (PUT .../state answered 200)", u)
		}
		if !logContains(s.logPath("jupyterhub"), "] "+u+" still running") {
			t.Errorf("JupyterHub's log does not say %q after its restart", u+" still running")
		}
	}
	checkServersKept(t, s, tc.places, old, "after JupyterHub restarted too")

	// A stop through JupyterHub removes the old pod; the next start
	// follows the new configuration.
	u := users[0]
	s.mustAPI(ctx, t, http.MethodDelete, serverPath(u, ""), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, u, "", 60*time.Second, "stopped", gone)
	waitNoPodsEverywhere(t, tc.places, u, 30*time.Second)
	// JupyterHub keeps the claim's name alone (as KubeSpawner keeps
	// pvc_name), for the next start.
	var want any // none without a claim
	if tc.claim != nil {
		want = map[string]any{"pvc_name": tc.claim(u)}
	}
	if got, err := s.stoppedState(ctx, u); err != nil || !reflect.DeepEqual(got["spawnkit_state"], want) {
		t.Errorf("JupyterHub's state of %s's stopped server: %v, %v; want spawnkit_state %v", u, got, err, want)
	}
	s.startServer(ctx, t, u, "", map[string]string{"profile": tc.nextProfile})
	s.waitServer(ctx, t, u, "", 90*time.Second, "ready after the change", ready)
	p := onePodEverywhere(ctx, t, tc.places, u)
	if err := tc.next(u, p); err != nil {
		t.Errorf("%s's pod after the change: %v", u, err)
	}
	if answer, err := s.viaProxy(ctx, userURL(u, "")); err != nil || answer.Pod != p.pod.Name || answer.Namespace != p.pod.Namespace {
		t.Errorf("%s through the proxy after the change: %+v, %v; want an answer from %s", u, answer, err, p)
	}
	if tc.claim != nil {
		all, err := s.servers(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if got := stateField(all[""].State, "pvc_name"); got != tc.claim(u) {
			t.Errorf("%s's start after the change uses claim %q, want its own %q (JupyterHub's state: %v)", u, got, tc.claim(u), all[""].State)
		}
		if claims := claimsEverywhere(ctx, t, tc.places, u); len(claims) != 1 || !strings.HasSuffix(claims[0], "/"+tc.claim(u)) {
			t.Errorf("%s has claims %v after the change, want only %s", u, claims, tc.claim(u))
		}
	}

	// The other server, still under the old configuration, stops too:
	// its old pod goes.
	for _, u := range []string{users[1], users[0]} {
		s.mustAPI(ctx, t, http.MethodDelete, serverPath(u, ""), nil, http.StatusNoContent, http.StatusAccepted)
		s.waitServer(ctx, t, u, "", 60*time.Second, "stopped", gone)
		waitNoPodsEverywhere(t, tc.places, u, 30*time.Second)
	}
}

// testNamespaceNotRetiredYet: the operator moves the namespace but
// forgets retired_namespaces. The new service does not know the servers
// in the old one (404) and refuses the state JupyterHub kept for them
// (409 StateRefused, naming the option); JupyterHub keeps them all the
// same, logging the service's message once per server, and they answer
// as before. Once the old namespace is listed, a restarted service takes
// the state, and a stop removes the old pod.
func testNamespaceNotRetiredYet(t *testing.T, tl tools, a *testcluster.Cluster) {
	ctx := t.Context()
	const moved = "config-change-forgot"
	createNamespace(t, a, moved)
	dir := t.TempDir()
	before, forgot, fixed := filepath.Join(dir, "before.yaml"), filepath.Join(dir, "forgot.yaml"), filepath.Join(dir, "fixed.yaml")
	writeServiceConfig(t, before, nil)
	writeServiceConfig(t, forgot, func(cfg map[string]any) { cfg["namespace"] = moved })
	writeServiceConfig(t, fixed, func(cfg map[string]any) {
		cfg["namespace"] = moved
		cfg["retired_namespaces"] = []any{namespace}
	})
	places := []place{{"", a}}
	users := []string{"uma", "vera"}
	s := newStack(t, tl, a, stackOptions{serviceConfig: before})
	t.Cleanup(func() { deletePodsEverywhere(t, places, users) })
	old := map[string]serverPod{}
	running := make([][2]string, len(users))
	for i, u := range users {
		s.createUser(ctx, t, u)
		s.startServer(ctx, t, u, "", map[string]string{"profile": "default"})
		running[i] = [2]string{u, ""}
	}
	for _, u := range users {
		s.waitServer(ctx, t, u, "", 90*time.Second, "ready", ready)
		old[u] = onePodEverywhere(ctx, t, places, u)
	}

	began := time.Now()
	s.opts.serviceConfig = forgot
	s.restartService(ctx, t)
	refused := func(u string) int {
		return logCount(s.logPath("spawner-service"), `"msg"="request"`, `"method"="PUT"`,
			`"path"="/v1`+serverPath(u, "")+`/state"`, `"status"=409`)
	}
	testutil.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, "the Spawner to send each user's refused state at least 3 times", func() error {
		for _, u := range users {
			if n := refused(u); n < 3 {
				return fmt.Errorf("the service refused %s's state %d times, want JupyterHub's Spawner to have sent it at least 3 times", u, n)
			}
		}
		return nil
	})
	hubLog := s.logPath("jupyterhub")
	for _, u := range users {
		if n := logCount(hubLog, "refused the state JupyterHub kept for "+u+",", "retired_namespaces"); n != 1 {
			t.Errorf("JupyterHub's log has %d errors saying the service refused %s's state and naming retired_namespaces, want 1", n, u)
		}
	}
	checkServersKept(t, s, places, old, "while the service refuses their state")
	t.Logf("service restarted without the old namespace: every state refused 3 times, servers kept, in %s", time.Since(began).Round(time.Millisecond))
	began = time.Now()

	s.opts.serviceConfig = fixed
	s.restartService(ctx, t)
	s.waitPolls(t, running, 3)
	checkServersKept(t, s, places, old, "once the old namespace is retired")
	t.Logf("service restarted with the old namespace retired: servers kept in %s", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	for _, u := range users {
		s.mustAPI(ctx, t, http.MethodDelete, serverPath(u, ""), nil, http.StatusNoContent, http.StatusAccepted)
		s.waitServer(ctx, t, u, "", 60*time.Second, "stopped", gone)
		waitNoPodsEverywhere(t, places, u, 30*time.Second)
	}
	t.Logf("both stopped, their old pods gone, in %s", time.Since(began).Round(time.Millisecond))
}

// checkServersKept checks that every server of old is still JupyterHub's,
// ready, answering through the proxy from the same pod, with no other
// pod anywhere, and that JupyterHub never recorded one stopped.
func checkServersKept(t *testing.T, s *stack, places []place, old map[string]serverPod, when string) {
	t.Helper()
	ctx := t.Context()
	hubLog := s.logPath("jupyterhub")
	for u, was := range old {
		if logContains(hubLog, "User "+u+" server stopped") || logContains(hubLog, u+" appears to have stopped") {
			t.Errorf("%s: JupyterHub's log says %s's server stopped", when, u)
		}
		s.waitServer(ctx, t, u, "", 30*time.Second, "ready "+when, ready)
		if p := onePodEverywhere(ctx, t, places, u); p.pod.UID != was.pod.UID {
			t.Errorf("%s: %s's pod is %s, was %s (UID %s, was %s)", when, u, p, was, p.pod.UID, was.pod.UID)
		}
		answer, err := s.viaProxy(ctx, userURL(u, ""))
		if err != nil || answer.Pod != was.pod.Name || answer.Namespace != was.pod.Namespace {
			t.Errorf("%s: %s through the proxy: %+v, %v; want an answer from %s", when, u, answer, err, was)
		}
	}
}

// stateSent is how many of the Spawner's PUT .../state for a user's
// default server the service answered 200.
func (s *stack) stateSent(user string) int {
	return logCount(s.logPath("spawner-service"), `"msg"="request"`, `"method"="PUT"`,
		`"path"="/v1`+serverPath(user, "")+`/state"`, `"status"=200`)
}

// podsEverywhere lists the pods of a user's default server in every
// namespace of every place, by spawnkit's label and KubeSpawner's owner
// annotations.
func podsEverywhere(ctx context.Context, t *testing.T, places []place, user string) []serverPod {
	t.Helper()
	var out []serverPod
	for _, pl := range places {
		list, err := pl.c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			LabelSelector: naming.LabelManagedBy + "=" + naming.ManagedBySpawnkit,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.Annotations[naming.AnnotationUsername] == user && p.Annotations[naming.AnnotationServername] == "" {
				out = append(out, serverPod{cluster: pl.name, pod: p})
			}
		}
	}
	return out
}

// onePodEverywhere returns the user's only pod, or fails the test.
func onePodEverywhere(ctx context.Context, t *testing.T, places []place, user string) serverPod {
	t.Helper()
	pods := podsEverywhere(ctx, t, places, user)
	if len(pods) != 1 {
		names := make([]string, len(pods))
		for i, p := range pods {
			names[i] = p.String()
		}
		t.Fatalf("%s has %d pods (%s), want 1", user, len(pods), strings.Join(names, ", "))
	}
	return pods[0]
}

// waitNoPodsEverywhere waits until the user has no pod in any place.
func waitNoPodsEverywhere(t *testing.T, places []place, user string, timeout time.Duration) {
	t.Helper()
	testutil.EventuallyEvery(t, 100*time.Millisecond, timeout, user+"'s pods gone everywhere", func() error {
		if pods := podsEverywhere(t.Context(), t, places, user); len(pods) > 0 {
			return fmt.Errorf("%s still has pod %s", user, pods[0])
		}
		return nil
	})
}

// deletePodsEverywhere deletes the users' pods in every place and waits
// until they are gone.
func deletePodsEverywhere(t *testing.T, places []place, users []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type left struct {
		c   *testcluster.Cluster
		pod serverPod
	}
	var pending []left
	for _, pl := range places {
		for _, u := range users {
			for _, p := range podsEverywhere(ctx, t, []place{pl}, u) {
				err := pl.c.Client.CoreV1().Pods(p.pod.Namespace).Delete(ctx, p.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting pod %s: %v", p, err)
				}
				pending = append(pending, left{pl.c, p})
			}
		}
	}
	for _, l := range pending {
		if _, err := l.c.WaitForPod(ctx, l.pod.pod.Namespace, l.pod.pod.Name, goneOrReplaced(l.pod.pod.UID)); err != nil {
			t.Errorf("pod %s still there after a minute: %v", l.pod, err)
			return
		}
	}
}

// goneOrReplaced is a testcluster.WaitForPod condition: the pod of uid is
// deleted (another pod of its name is not it).
func goneOrReplaced(uid types.UID) func(*corev1.Pod) (bool, error) {
	return func(p *corev1.Pod) (bool, error) { return p == nil || p.UID != uid, nil }
}

// stoppedState is the state JupyterHub keeps for a user's stopped
// default server.
func (s *stack) stoppedState(ctx context.Context, user string) (map[string]any, error) {
	code, data, err := s.api(ctx, http.MethodGet, "/users/"+user+"?include_stopped_servers=1", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET user %s = %d %s", user, code, data)
	}
	var u struct {
		Servers map[string]hubServer `json:"servers"`
	}
	if err := json.Unmarshal(data, &u); err != nil {
		return nil, err
	}
	srv, ok := u.Servers[""]
	if !ok {
		return nil, fmt.Errorf("user %s has no default server, stopped or not: %s", user, data)
	}
	return srv.State, nil
}

// claimsEverywhere names a user's claims in every namespace of every
// place (by KubeSpawner's username label).
func claimsEverywhere(ctx context.Context, t *testing.T, places []place, user string) []string {
	t.Helper()
	var out []string
	for _, pl := range places {
		list, err := pl.c.Client.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			LabelSelector: naming.LabelUsername + "=" + user,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list.Items {
			out = append(out, c.Namespace+"/"+c.Name)
		}
	}
	return out
}

// deleteClaimsEverywhere deletes the users' claims in every place.
func deleteClaimsEverywhere(t *testing.T, places []place, users []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, pl := range places {
		for _, u := range users {
			for _, c := range claimsEverywhere(ctx, t, []place{pl}, u) {
				ns, name, _ := strings.Cut(c, "/")
				if err := pl.c.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting claim %s: %v", c, err)
				}
			}
		}
	}
}

// createNamespace creates a namespace in c (it may exist from an earlier
// run against the same cluster).
func createNamespace(t *testing.T, c *testcluster.Cluster, name string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// writeServiceConfig writes testdata/spawner-service.yaml to file, with
// edit's changes (nil: as it is).
func writeServiceConfig(t *testing.T, file string, edit func(cfg map[string]any)) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "spawner-service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, file, string(out))
}

func writeFile(t *testing.T, file, content string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// stateField is a field of the spawnkit state JupyterHub stored.
func stateField(state map[string]any, field string) string {
	sk, _ := state["spawnkit_state"].(map[string]any)
	v, _ := sk[field].(string)
	return v
}

func wantPodName(p serverPod, name string) error {
	if p.pod.Name != name {
		return fmt.Errorf("pod %s, want the name %s", p, name)
	}
	return nil
}

func wantNamespace(p serverPod, ns string) error {
	if p.pod.Namespace != ns {
		return fmt.Errorf("pod %s, want namespace %s", p, ns)
	}
	return nil
}

func wantCluster(p serverPod, name string) error {
	if p.cluster != name || p.pod.Labels[naming.LabelCluster] != name {
		return fmt.Errorf("pod %s with label %s=%q, want cluster %s", p, naming.LabelCluster, p.pod.Labels[naming.LabelCluster], name)
	}
	return nil
}
