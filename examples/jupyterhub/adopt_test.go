package jupyterhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

// TestJupyterHubAdoptKubeSpawner: a hub switched from KubeSpawner to
// spawnkit keeps every running server (issue 45, item 4; docs/z2jh.md,
// "Switching over"). Each case starts from what a KubeSpawner 7.1 hub
// leaves behind: pods (and claims) exactly as KubeSpawner makes them
// (the config and z2jh vectors' expected objects), and JupyterHub's
// database holding them as KubeSpawner's running servers: an orm.Spawner
// row with
// KubeSpawner's get_state and an orm.Server with the pod's address,
// written with JupyterHub's own ORM while the hub is stopped
// (KubeSpawner itself is not installed here). JupyterHub then starts with
// SpawnkitSpawner, as after the helm upgrade.
//
//   - Switch: the service runs with -adopt-kubespawner. Every server is
//     ready in JupyterHub, never recorded stopped, and answers through
//     the proxy from KubeSpawner's pod, which is neither deleted nor
//     replaced until the hub stops the server (the pods are watched for
//     the whole case); JupyterHub's state names the pod, and
//     KubeSpawner's claim. A stop through JupyterHub deletes the pod; the
//     next start makes a spawnkit pod on KubeSpawner's claim. The servers
//     are alice's (KubeSpawner's defaults), Jill's "data" (a claim, an
//     escaped name), eve's "exp1" (a pod_name_template other than the
//     service's: found through JupyterHub's state alone) and carol's (a
//     pod and claim from the z2jh 4.4.0 chart's hub configuration, with
//     the chart's labels, a profile and an init container). The way
//     back: while spawnkit runs them, JupyterHub's database keeps
//     KubeSpawner's state; a spawnkit pod is where KubeSpawner would
//     look for it.
//   - WithoutTheFlag: the service runs without it. JupyterHub keeps the
//     servers, each poll's state refused (the refusal logged, naming
//     -adopt-kubespawner), and routes to KubeSpawner's pods; nothing
//     deletes them, not even a stop through JupyterHub, which fails and
//     leaves JupyterHub recording the server stopped while its pod runs
//     on. Restarted with the flag, the service takes the server
//     JupyterHub kept (never stopped), and the other one's pod at its
//     next start.
func TestJupyterHubAdoptKubeSpawner(t *testing.T) {
	tl := requireTools(t)
	c := testcluster.Require(t, cluster)
	t.Run("Switch", func(t *testing.T) { testAdoptSwitch(t, tl, c) })
	t.Run("WithoutTheFlag", func(t *testing.T) { testAdoptWithoutTheFlag(t, tl, c) })
}

func testAdoptSwitch(t *testing.T, tl tools, c *testcluster.Cluster) {
	ctx := t.Context()
	servers := []*kubeSpawnerServer{
		loadKubeSpawnerServer(t, "defaults_default_server"),
		loadKubeSpawnerServer(t, "storage_full"),
		loadKubeSpawnerServer(t, "custom_name_templates"),
		loadZ2JHServer(t, "profile_list_three", "carol"),
	}
	// The profile "storage" mounts the server's claim ({pvc_name}), as
	// z2jh's singleuser.storage values make KubeSpawner's pods do.
	config := filepath.Join(t.TempDir(), "spawner-service.yaml")
	writeServiceConfig(t, config, func(cfg map[string]any) {
		for _, p := range cfg["profile_list"].([]any) {
			if p := p.(map[string]any); p["slug"] == "storage" {
				o := p["kubespawner_override"].(map[string]any)
				o["volumes"] = []any{map[string]any{"name": "volume-{user_server}", "persistentVolumeClaim": map[string]any{"claimName": "{pvc_name}"}}}
				o["volume_mounts"] = []any{map[string]any{"name": "volume-{user_server}", "mountPath": "/home/jovyan"}}
			}
		}
	})
	s, pw := switchToSpawnkit(t, tl, c, servers, stackOptions{serviceConfig: config, adoptKubeSpawner: true})
	hubLog := s.logPath("jupyterhub")

	polled := make([][2]string, len(servers))
	for i, ks := range servers {
		polled[i] = [2]string{ks.user, ks.server}
		s.waitServer(ctx, t, ks.user, ks.server, 60*time.Second, "ready after the switch", ready)
	}
	// Several polls each, every one answered by the service.
	s.waitPolls(t, polled, 3)
	for _, ks := range servers {
		checkKeptOnKubeSpawnersPod(t, s, pw, ks)
		if n := s.stateAnswered(ks.user, ks.server, http.StatusOK); n == 0 {
			t.Errorf("%s: the service never took JupyterHub's state (PUT .../state answered 200)", ks)
		}
		all, err := s.servers(ctx, ks.user)
		if err != nil {
			t.Fatal(err)
		}
		st := all[ks.server].State
		if got := stateField(st, "pod_name"); got != ks.pod.Name {
			t.Errorf("%s: JupyterHub's state names pod %q, want KubeSpawner's %s: %v", ks, got, ks.pod.Name, st)
		}
		if ks.claim != nil {
			if got := stateField(st, "pvc_name"); got != ks.claim.Name {
				t.Errorf("%s: JupyterHub's state names claim %q, want KubeSpawner's %s: %v", ks, got, ks.claim.Name, st)
			}
		}
	}
	if logContains(hubLog, "appears to have stopped while the Hub was down") {
		t.Error("JupyterHub's log says a server stopped while the hub was down")
	}
	// The way back, before any stop: JupyterHub's database still holds
	// KubeSpawner's own state for each server, naming its pod, which
	// KubeSpawner brought back would load and find.
	for _, ks := range servers {
		if got := s.hubDBState(ctx, t, ks.user, ks.server); !reflect.DeepEqual(got, ks.state) {
			t.Errorf("%s: JupyterHub's database holds the state %v, want KubeSpawner's %v", ks, got, ks.state)
		}
	}

	// A stop through JupyterHub deletes KubeSpawner's pod.
	for _, ks := range servers {
		stopAt := time.Now()
		s.mustAPI(ctx, t, http.MethodDelete, serverPath(ks.user, ks.server), nil, http.StatusNoContent, http.StatusAccepted)
		s.waitServer(ctx, t, ks.user, ks.server, 60*time.Second, "stopped", gone)
		waitPodGone(t, c, ks.pod)
		if d := pw.disturbed(ks.pod.UID, stopAt); len(d) > 0 {
			t.Errorf("%s: KubeSpawner's pod %s before the hub stopped it: %s", ks, ks.pod.Name, strings.Join(d, "; "))
		}
	}

	// The next start of Jill's server mounts KubeSpawner's claim (its
	// name kept in JupyterHub's state across the stop), and makes none.
	ks := servers[1]
	if got, err := s.stoppedServerState(ctx, ks.user, ks.server); err != nil || stateField(got, "pvc_name") != ks.claim.Name {
		t.Errorf("%s: JupyterHub's state of the stopped server: %v, %v; want spawnkit_state naming claim %s", ks, got, err, ks.claim.Name)
	}
	s.startServer(ctx, t, ks.user, ks.server, map[string]string{"profile": "storage"})
	s.waitServer(ctx, t, ks.user, ks.server, 90*time.Second, "ready after a new start", ready)
	pod := s.onePod(ctx, t, ks.user, ks.server)
	if pod.Labels[naming.LabelManagedBy] != naming.ManagedBySpawnkit {
		t.Errorf("%s: the new pod %s is labelled %s=%q, want spawnkit's", ks, pod.Name, naming.LabelManagedBy, pod.Labels[naming.LabelManagedBy])
	}
	var mounted []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			mounted = append(mounted, v.PersistentVolumeClaim.ClaimName)
		}
	}
	if !slices.Equal(mounted, []string{ks.claim.Name}) {
		t.Errorf("%s: the new pod mounts claims %q, want KubeSpawner's [%s]", ks, mounted, ks.claim.Name)
	}
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range claims.Items {
		if cl.Annotations[naming.AnnotationUsername] == ks.user && cl.UID != ks.claim.UID {
			t.Errorf("%s: a claim of its own was made, %s, besides KubeSpawner's %s", ks, cl.Name, ks.claim.Name)
		}
	}
	if answer, err := s.viaProxy(ctx, userURL(ks.user, ks.server)); err != nil || answer.Pod != pod.Name {
		t.Errorf("%s through the proxy after the new start: %+v, %v; want an answer from %s", ks, answer, err, pod.Name)
	}
	// The way back for a server spawnkit started: KubeSpawner brought
	// back would look for its pod where spawnkit made it. JupyterHub's
	// state of it is spawnkit's (no pod_name), so KubeSpawner renders its
	// pod_name_template, whose rendering is KubeSpawner's pod name of
	// the vector (the same template as the service's); its poll reads
	// the container "notebook" of a pod its reflector watches.
	dbState := s.hubDBState(ctx, t, ks.user, ks.server)
	if stateField(dbState, "pod_name") != pod.Name {
		t.Errorf("%s: JupyterHub's database holds the state %v, want spawnkit's naming pod %s", ks, dbState, pod.Name)
	}
	if ns, name := kubeSpawnerLooksAt(dbState, namespace, ks.pod.Name); ns != pod.Namespace || name != pod.Name {
		t.Errorf("%s: KubeSpawner brought back would look for pod %s/%s, but spawnkit's is %s/%s", ks, ns, name, pod.Namespace, pod.Name)
	}
	var containers []string
	for _, ctr := range pod.Spec.Containers {
		containers = append(containers, ctr.Name)
	}
	if pod.Labels["component"] != "singleuser-server" || !slices.Contains(containers, "notebook") {
		t.Errorf("%s: spawnkit's pod %s has the label component=%q and containers %q; KubeSpawner's poll reads container notebook of a pod labelled component=singleuser-server",
			ks, pod.Name, pod.Labels["component"], containers)
	}
	s.mustAPI(ctx, t, http.MethodDelete, serverPath(ks.user, ks.server), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, ks.user, ks.server, 60*time.Second, "stopped", gone)
}

func testAdoptWithoutTheFlag(t *testing.T, tl tools, c *testcluster.Cluster) {
	ctx := t.Context()
	kept, stopped := loadKubeSpawnerServer(t, "defaults_default_server"), loadKubeSpawnerServer(t, "python_format_spec_in_templates")
	servers := []*kubeSpawnerServer{kept, stopped}
	s, pw := switchToSpawnkit(t, tl, c, servers, stackOptions{})
	hubLog := s.logPath("jupyterhub")

	for _, ks := range servers {
		s.waitServer(ctx, t, ks.user, ks.server, 60*time.Second, "ready after the switch", ready)
	}
	// Each poll sends the state again, and is refused again.
	refused := map[*kubeSpawnerServer]int{}
	for _, ks := range servers {
		refused[ks] = s.stateAnswered(ks.user, ks.server, http.StatusConflict)
	}
	testutil.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, "the service to refuse each server's state on 3 more polls", func() error {
		for _, ks := range servers {
			if n := s.stateAnswered(ks.user, ks.server, http.StatusConflict) - refused[ks]; n < 3 {
				return fmt.Errorf("%s: the service refused %d more states, want 3 polls' worth", ks, n)
			}
		}
		return nil
	})
	for _, ks := range servers {
		checkKeptOnKubeSpawnersPod(t, s, pw, ks)
		if !logContains(hubLog, "refused the state JupyterHub kept for "+ks.user, "-adopt-kubespawner") {
			t.Errorf("%s: JupyterHub's log does not say the service refused its state, naming -adopt-kubespawner", ks)
		}
	}

	// A stop through JupyterHub fails (logged, naming the flag), and
	// JupyterHub records the server stopped all the same; the pod runs on.
	s.mustAPI(ctx, t, http.MethodDelete, serverPath(stopped.user, stopped.server), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, stopped.user, stopped.server, 60*time.Second, "stopped in JupyterHub", gone)
	if !logContains(hubLog, "spawnkit: cannot stop "+stopped.user, "-adopt-kubespawner") {
		t.Errorf("JupyterHub's log does not say %s could not be stopped, naming -adopt-kubespawner", stopped)
	}
	// Two more polls of the other server meanwhile.
	n := s.stateAnswered(kept.user, kept.server, http.StatusConflict)
	testutil.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, "2 more refused polls of "+kept.String(), func() error {
		if got := s.stateAnswered(kept.user, kept.server, http.StatusConflict) - n; got < 2 {
			return fmt.Errorf("%s: %d more polls refused, want 2", kept, got)
		}
		return nil
	})
	for _, ks := range servers {
		if d := pw.disturbed(ks.pod.UID, time.Now()); len(d) > 0 {
			t.Errorf("%s: KubeSpawner's pod %s, with a service without -adopt-kubespawner: %s", ks, ks.pod.Name, strings.Join(d, "; "))
		}
	}

	// The operator adds the flag: the next poll's state is taken.
	s.opts.adoptKubeSpawner = true
	s.restartService(ctx, t)
	taken := s.stateAnswered(kept.user, kept.server, http.StatusOK)
	testutil.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, "the service restarted with -adopt-kubespawner to take JupyterHub's state", func() error {
		if s.stateAnswered(kept.user, kept.server, http.StatusOK) == taken {
			return fmt.Errorf("%s: the service restarted with -adopt-kubespawner has not taken JupyterHub's state", kept)
		}
		return nil
	})
	s.waitPolls(t, [][2]string{{kept.user, kept.server}}, 2)
	checkKeptOnKubeSpawnersPod(t, s, pw, kept)

	// The server JupyterHub recorded stopped: its next start finds
	// KubeSpawner's pod running, and starts nothing.
	s.startServer(ctx, t, stopped.user, stopped.server, nil)
	s.waitServer(ctx, t, stopped.user, stopped.server, 60*time.Second, "ready after its start", ready)
	checkKeptOnKubeSpawnersPod(t, s, pw, stopped)

	for _, ks := range servers {
		stopAt := time.Now()
		s.mustAPI(ctx, t, http.MethodDelete, serverPath(ks.user, ks.server), nil, http.StatusNoContent, http.StatusAccepted)
		s.waitServer(ctx, t, ks.user, ks.server, 60*time.Second, "stopped", gone)
		waitPodGone(t, c, ks.pod)
		if d := pw.disturbed(ks.pod.UID, stopAt); len(d) > 0 {
			t.Errorf("%s: KubeSpawner's pod %s before the hub stopped it: %s", ks, ks.pod.Name, strings.Join(d, "; "))
		}
	}
}

// switchToSpawnkit makes a stack whose JupyterHub holds servers as a
// KubeSpawner hub left them: it starts the stack (JupyterHub makes its
// database) and creates the users through the API, stops JupyterHub and
// the service, creates each server's objects as KubeSpawner made them and
// records each as running in JupyterHub's database, then starts the
// service (with -adopt-kubespawner when opts say so) and JupyterHub. The
// pods are watched from before the service starts until the test ends.
func switchToSpawnkit(t *testing.T, tl tools, c *testcluster.Cluster, servers []*kubeSpawnerServer, opts stackOptions) (*stack, *podWatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s := newStack(t, tl, c, opts)
	// Runs before the stack stops: nothing of these servers is left for
	// the tests after this one.
	t.Cleanup(func() {
		for _, ks := range servers {
			ks.delete(t, c)
		}
	})
	for _, ks := range servers {
		s.createUser(ctx, t, ks.user)
	}
	for _, p := range []*process{s.hub, s.service} {
		if err := p.stop(15 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, ks := range servers {
		ks.create(ctx, t, c)
	}
	s.recordRunning(ctx, t, servers)
	pw := watchPods(t, c)
	s.startService(ctx, t)
	s.startHub(ctx, t)
	return s, pw
}

// checkKeptOnKubeSpawnersPod checks that JupyterHub has the server ready,
// never logged it stopped, and reaches it through the proxy on
// KubeSpawner's pod, which nothing has deleted or replaced.
func checkKeptOnKubeSpawnersPod(t *testing.T, s *stack, pw *podWatch, ks *kubeSpawnerServer) {
	t.Helper()
	ctx := t.Context()
	hubLog := s.logPath("jupyterhub")
	s.waitServer(ctx, t, ks.user, ks.server, 30*time.Second, "ready", ready)
	if logContains(hubLog, "User "+ks.user+" server stopped") || logContains(hubLog, ks.logName()+" appears to have stopped") {
		t.Errorf("%s: JupyterHub's log says the server stopped", ks)
	}
	if d := pw.disturbed(ks.pod.UID, time.Now()); len(d) > 0 {
		t.Errorf("%s: KubeSpawner's pod %s: %s", ks, ks.pod.Name, strings.Join(d, "; "))
	}
	pods, err := s.podsOf(ctx, ks.user, ks.server)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].UID != ks.pod.UID {
		t.Errorf("%s: pods %v, want only KubeSpawner's %s (UID %s)", ks, podNames(pods), ks.pod.Name, ks.pod.UID)
	}
	answer, err := s.viaProxy(ctx, userURL(ks.user, ks.server))
	if err != nil || answer.Pod != ks.pod.Name || answer.Namespace != ks.pod.Namespace {
		t.Errorf("%s through the proxy: %+v, %v; want an answer from KubeSpawner's pod %s", ks, answer, err, ks.pod.Name)
	}
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = fmt.Sprintf("%s (UID %s)", p.Name, p.UID)
	}
	return out
}

// stateAnswered is how many of the Spawner's PUT .../state for a server
// the service answered with code.
func (s *stack) stateAnswered(user, server string, code int) int {
	return logCount(s.logPath("spawner-service"), `"msg"="request"`, `"method"="PUT"`,
		`"path"="/v1`+serverPath(user, server)+`/state"`, fmt.Sprintf(`"status"=%d`, code))
}

// stoppedServerState is the state JupyterHub keeps for a user's stopped
// server.
func (s *stack) stoppedServerState(ctx context.Context, user, server string) (map[string]any, error) {
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
	srv, ok := u.Servers[server]
	if !ok {
		return nil, fmt.Errorf("user %s has no server %q, stopped or not: %s", user, server, data)
	}
	return srv.State, nil
}
