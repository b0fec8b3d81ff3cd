package jupyterhub_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

var (
	cluster  *testcluster.Cluster
	found    tools
	toolsErr error
)

func TestMain(m *testing.M) {
	found, toolsErr = findTools()
	if toolsErr != nil {
		// No cluster is worth starting without JupyterHub; the test skips,
		// or fails under CI=true (requireTools).
		fmt.Fprintf(os.Stderr, "jupyterhub: %v\n", toolsErr)
		os.Exit(m.Run())
	}
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1, Responders: true}, &cluster)
}

// TestJupyterHub runs a real JupyterHub (Debian's 3.0) with the
// spawnkit-jupyterhub package installed into a venv, as an operator
// installs it, and c.JupyterHub.spawner_class = "spawnkit", against the
// spawner-service on a simulated cluster, and drives it like its users
// and admins do. The steps share one stack and run in order: later ones
// restart the processes the earlier servers run under.
func TestJupyterHub(t *testing.T) {
	tl := requireTools(t)
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	s := newStack(t, tl, c, stackOptions{hubConfig: contractConfig})
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin", "frank"} {
		s.createUser(ctx, t, u)
	}

	t.Run("Package", func(t *testing.T) { testPackage(t, s) })
	t.Run("StartProgressAndProxy", func(t *testing.T) { testStartProgressAndProxy(t, s) })
	t.Run("NamedServersAndTwoUsers", func(t *testing.T) { testNamedServersAndTwoUsers(t, s) })
	t.Run("OptionsForm", func(t *testing.T) { testOptionsForm(t, s) })
	t.Run("RestartKeepsServers", func(t *testing.T) { testRestartKeepsServers(t, s) })
	t.Run("ImagePullFailure", func(t *testing.T) { testImagePullFailure(t, s) })
	t.Run("StartTimeout", func(t *testing.T) { testStartTimeout(t, s) })
	t.Run("ExitCode", func(t *testing.T) { testExitCode(t, s) })
	t.Run("Stop", func(t *testing.T) { testStop(t, s) })
	t.Run("DeleteForever", func(t *testing.T) { testDeleteForever(t, s) })
	t.Run("StartWhileServiceDown", func(t *testing.T) { testStartWhileServiceDown(t, s) })
	// JupyterHub 5 and 6's spawner contract, where 3.0 exercises it
	// (python/README.md has the whole table).
	t.Run("PollBeforeStart", func(t *testing.T) { testPollBeforeStart(t, s) })
	t.Run("EnvAndUserOptions", func(t *testing.T) { testEnvAndUserOptions(t, s) })
	t.Run("StopWhileStartIsRetried", func(t *testing.T) { testStopWhileStartIsRetried(t, s) })
}

// A start's progress stream carries spawnkit's events and ends ready; the
// spawn-pending page shows them; the proxy routes /user/alice/ to the pod.
func testStartProgressAndProxy(t *testing.T, s *stack) {
	ctx := t.Context()
	// The slow-boot profile keeps the server refusing connections after
	// its pod is Ready until the test lets it go, so the start is still
	// pending when the progress stream and the browser look at it, however
	// slow the browser is.
	s.startServer(ctx, t, "alice", "", map[string]string{"profile": "slow-boot"})

	type result struct {
		events []progressEvent
		err    error
	}
	streamed := make(chan result, 1)
	go func() {
		pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		events, err := s.progress(pctx, "alice", "")
		streamed <- result{events, err}
	}()

	screenshotSpawnPending(t, s, "alice", "")
	s.release(ctx, t, "alice", "")

	r := <-streamed
	if r.err != nil {
		t.Fatal(r.err)
	}
	last := r.events[len(r.events)-1]
	if !last.Ready || last.URL != "/user/alice/" {
		t.Fatalf("the progress stream ended with %+v, want ready at /user/alice/", last)
	}
	pod := s.onePod(ctx, t, "alice", "")
	// JupyterHub's version reaches the pod as KubeSpawner writes it.
	if v := pod.Annotations["hub.jupyter.org/jupyterhub-version"]; !strings.HasPrefix(v, "3.") {
		t.Errorf("pod %s has hub.jupyter.org/jupyterhub-version %q, want Debian's JupyterHub 3.x", pod.Name, v)
	}
	// As KubeSpawner (env_keep = []): none of the hub's own environment
	// reaches the pod, whose image has its own PATH.
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "PATH" || e.Name == "PYTHONPATH" || e.Name == "LANG" || e.Name == "HOME" {
				t.Errorf("pod %s container %s has the hub's %s=%q", pod.Name, c.Name, e.Name, e.Value)
			}
		}
	}
	if n := spawnkitMessages(r.events, pod.Name); n == 0 {
		t.Fatalf("no progress event names pod %s or carries a Kubernetes event; events: %+v", pod.Name, r.events)
	}
	// The configuration's event_message_rules shaped the scheduler's
	// event on its way to JupyterHub's progress API.
	placed := false
	for _, e := range r.events {
		placed = placed || strings.Contains(e.Message, "Your server was placed on node "+pod.Spec.NodeName)
		if strings.Contains(e.Message, "Successfully assigned") {
			t.Errorf("the scheduler's own message reached the hub: %q", e.Message)
		}
	}
	if !placed {
		t.Errorf("no progress event says the server was placed on node %s; events: %+v; the pod's events in the API: %s",
			pod.Spec.NodeName, r.events, s.podEventTimes(ctx, &pod))
	}

	s.waitServer(ctx, t, "alice", "", 30*time.Second, "ready", ready)
	checkRoute(t, s, "alice", "", pod)
	a, err := s.viaProxy(ctx, "/user/alice/lab?x=1")
	if err != nil {
		t.Fatal(err)
	}
	if a.Pod != pod.Name || a.Namespace != namespace || a.Path != "/user/alice/lab" {
		t.Fatalf("the proxy reached %+v, want pod %s/%s at /user/alice/lab", a, namespace, pod.Name)
	}
}

// spawnkitMessages counts the progress events that come from spawnkit
// rather than from JupyterHub: Kubernetes events ("[Normal] ...") or
// messages naming the pod.
func spawnkitMessages(events []progressEvent, pod string) int {
	n := 0
	for _, ev := range events {
		if strings.Contains(ev.Message, "[Normal]") || strings.Contains(ev.Message, pod) {
			n++
		}
	}
	return n
}

// Two users start at once, one of them a named server next to a default
// one; each route leads to its own pod.
func testNamedServersAndTwoUsers(t *testing.T, s *stack) {
	ctx := t.Context()
	servers := [][2]string{{"alice", "lab 2"}, {"bob", ""}}
	var wg sync.WaitGroup
	errs := make(chan error, len(servers))
	for _, us := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, data, err := s.api(ctx, http.MethodPost, serverPath(us[0], us[1]), map[string]string{"profile": "default"})
			if err == nil && code != http.StatusCreated && code != http.StatusAccepted {
				err = fmt.Errorf("starting %s:%s = %d %s", us[0], us[1], code, data)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for _, us := range append(servers, [2]string{"alice", ""}) {
		s.waitServer(ctx, t, us[0], us[1], 60*time.Second, "ready", ready)
		pod := s.onePod(ctx, t, us[0], us[1])
		path := userURL(us[0], us[1])
		a, err := s.viaProxy(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if a.Pod != pod.Name {
			t.Errorf("%s reached pod %s, want %s", path, a.Pod, pod.Name)
		}
		if other, dup := seen[a.Pod]; dup {
			t.Errorf("%s and %s both reach pod %s", other, path, a.Pod)
		}
		seen[a.Pod] = path
	}
}

// A user logs in, gets the service's profile picker as JupyterHub's
// options form, and submits it; the server starts with KubeSpawner's
// user options.
func testOptionsForm(t *testing.T, s *stack) {
	ctx := t.Context()
	b := newBrowserSession(t, s)
	b.login(ctx, "carol")
	form := b.get(ctx, "/hub/spawn/carol/picked")
	for _, want := range []string{`name="profile"`, `value="default"`, `value="slow-boot"`} {
		if !strings.Contains(form, want) {
			t.Fatalf("the options form lacks %s:\n%s", want, form)
		}
	}
	b.post(ctx, "/hub/spawn/carol/picked", map[string][]string{"profile": {"default"}})
	s.waitServer(ctx, t, "carol", "picked", 60*time.Second, "ready", ready)
	all, err := s.servers(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	if got := all["picked"].UserOptions; got["profile"] != "default" {
		t.Fatalf("carol:picked started with user options %v, want profile default", got)
	}
	s.mustAPI(ctx, t, http.MethodDelete, serverPath("carol", "picked"), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, "carol", "picked", 30*time.Second, "stopped", gone)
}

// Restarting the service and JupyterHub stops nobody's server: the same
// pods keep serving, JupyterHub still lists them ready, and polling them
// afterwards keeps them.
func testRestartKeepsServers(t *testing.T, s *stack) {
	ctx := t.Context()
	running := [][2]string{{"alice", ""}, {"alice", "lab 2"}, {"bob", ""}}
	uids := map[[2]string]string{}
	for _, us := range running {
		uids[us] = string(s.onePod(ctx, t, us[0], us[1]).UID)
	}

	s.restartService(ctx, t)
	// JupyterHub polls every second: a few polls answered by the new
	// service, any of which would have ended a server it reported gone,
	// before restarting JupyterHub too; then a few by the new JupyterHub.
	s.waitPolls(t, running, 3)
	s.restartHub(ctx, t)
	s.waitPolls(t, running, 3)

	hubLog := s.logPath("jupyterhub")
	for _, user := range []string{"alice", "bob"} {
		// init_spawners found the server through poll and get_url...
		if !logContains(hubLog, "] "+user+" still running") {
			t.Errorf("JupyterHub's log does not say %q after its restart", user+" still running")
		}
		// ...and no poll during the service's restart ended it.
		if logContains(hubLog, "User "+user+" server stopped") || logContains(hubLog, user+" appears to have stopped") {
			t.Errorf("JupyterHub's log says %s's server stopped", user)
		}
	}
	for _, us := range running {
		s.waitServer(ctx, t, us[0], us[1], 30*time.Second, "ready", ready)
		pod := s.onePod(ctx, t, us[0], us[1])
		if string(pod.UID) != uids[us] {
			t.Errorf("%s:%s has a new pod %s after the restarts", us[0], us[1], pod.Name)
		}
		a, err := s.viaProxy(ctx, userURL(us[0], us[1]))
		if err != nil {
			t.Fatal(err)
		}
		if a.Pod != pod.Name {
			t.Errorf("%s reached pod %s after the restarts, want %s", userURL(us[0], us[1]), a.Pod, pod.Name)
		}
	}
}

// An image that cannot be pulled fails the start with the service's
// reason, and leaves no pod.
func testImagePullFailure(t *testing.T, s *stack) {
	ctx := t.Context()
	s.startServer(ctx, t, "dave", "", map[string]string{"profile": "pull-error"})
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	events, err := s.progress(pctx, "dave", "")
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if !last.Failed || !strings.Contains(last.Message, "ErrImagePull") {
		t.Fatalf("the progress stream ended with %+v, want a failure naming ErrImagePull; events: %+v", last, events)
	}
	s.waitServer(ctx, t, "dave", "", 30*time.Second, "gone", gone)
	waitNoPods(t, s, "dave", "", 10*time.Second)
}

// JupyterHub's own start_timeout gives up on a server that never becomes
// ready; stopping it removes its pod from the API server within 2 s.
func testStartTimeout(t *testing.T, s *stack) {
	ctx := t.Context()
	begin := time.Now()
	s.startServer(ctx, t, "erin", "", map[string]string{"profile": "never-ready"})
	s.waitServer(ctx, t, "erin", "", 10*time.Second, "pending with a pod", func(hs *hubServer) bool {
		pods, err := s.podsOf(ctx, "erin", "")
		return hs != nil && !hs.Ready && err == nil && len(pods) == 1
	})
	var goneAt time.Time
	testutil.EventuallyEvery(t, 50*time.Millisecond, time.Until(begin.Add(hubStartTimeout+30*time.Second)), "erin's pod gone after start_timeout", func() error {
		pods, err := s.podsOf(ctx, "erin", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) > 0 {
			return fmt.Errorf("erin's pod %s still exists %s after the start request (start_timeout %s)",
				pods[0].Name, time.Since(begin).Round(time.Millisecond), hubStartTimeout)
		}
		goneAt = time.Now()
		return nil
	})
	// When JupyterHub gave up, by its own log.
	gaveUp, ok := logTime(s.logPath("jupyterhub"), "erin's server failed to start in")
	if !ok {
		t.Fatalf("JupyterHub's log does not say erin's start timed out")
	}
	took := goneAt.Sub(gaveUp)
	t.Logf("JupyterHub gave up %s after the start request; the pod was gone %s later",
		gaveUp.Sub(begin).Round(time.Millisecond), took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("erin's pod was deleted %s after JupyterHub's start_timeout, want at most 2 s", took.Round(time.Millisecond))
	}
	s.waitServer(ctx, t, "erin", "", 30*time.Second, "gone", gone)
}

// A server whose container exits with code 3 is noticed by JupyterHub's
// poll, with exit status 3, and dropped.
func testExitCode(t *testing.T, s *stack) {
	ctx := t.Context()
	s.startServer(ctx, t, "frank", "", map[string]string{"profile": "exit-3"})
	s.waitServer(ctx, t, "frank", "", 60*time.Second, "ready", ready)
	s.waitServer(ctx, t, "frank", "", 60*time.Second, "stopped by its poll", gone)
	if !logContains(s.logPath("jupyterhub"), "User frank server stopped", "exit code: 3") {
		t.Fatalf("JupyterHub's log has no \"User frank server stopped, with exit code: 3\"")
	}
	waitNoPods(t, s, "frank", "", 10*time.Second)
}

// Stopping through JupyterHub's API deletes the pods.
func testStop(t *testing.T, s *stack) {
	ctx := t.Context()
	for _, us := range [][2]string{{"alice", ""}, {"alice", "lab 2"}, {"bob", ""}} {
		s.mustAPI(ctx, t, http.MethodDelete, serverPath(us[0], us[1]), nil, http.StatusNoContent, http.StatusAccepted)
		s.waitServer(ctx, t, us[0], us[1], 30*time.Second, "stopped", gone)
		waitNoPods(t, s, us[0], us[1], 10*time.Second)
	}
	if list, err := s.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	} else if len(list.Items) != 0 {
		t.Errorf("%d pods left in %s, want none", len(list.Items), namespace)
	}
}

// Removing a named server through JupyterHub's API stops it and calls
// the Spawner's delete_forever: the service deletes the server's claim,
// as KubeSpawner does; the user's other server keeps its own. Deleting
// the user calls delete_forever for the default server too.
func testDeleteForever(t *testing.T, s *stack) {
	ctx := t.Context()
	claims := s.cluster.Client.CoreV1().PersistentVolumeClaims(namespace)
	s.createUser(ctx, t, "grace")
	for _, server := range []string{"", "data"} {
		s.startServer(ctx, t, "grace", server, map[string]string{"profile": "storage"})
		s.waitServer(ctx, t, "grace", server, 60*time.Second, "ready", ready)
	}
	for _, name := range []string{"claim-grace", "claim-grace--data"} {
		if _, err := claims.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("claim %s after the start: %v", name, err)
		}
	}
	// remove: true is JupyterHub's "delete the named server for good".
	s.mustAPI(ctx, t, http.MethodDelete, serverPath("grace", "data"), map[string]bool{"remove": true}, http.StatusNoContent, http.StatusAccepted)
	testutil.EventuallyEvery(t, 100*time.Millisecond, 60*time.Second, "claim claim-grace--data deleted", func() error {
		c, err := claims.Get(ctx, "claim-grace--data", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			t.Fatal(err)
		}
		return fmt.Errorf("claim %s still exists (deletion timestamp %v)", c.Name, c.DeletionTimestamp)
	})
	waitNoPods(t, s, "grace", "data", 10*time.Second)
	if _, err := claims.Get(ctx, "claim-grace", metav1.GetOptions{}); err != nil {
		t.Errorf("the default server's claim after deleting the named one: %v", err)
	}
	s.mustAPI(ctx, t, http.MethodDelete, serverPath("grace", ""), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, "grace", "", 30*time.Second, "stopped", gone)
	if _, err := claims.Get(ctx, "claim-grace", metav1.GetOptions{}); err != nil {
		t.Errorf("the default server's claim after stopping it: %v", err)
	}
	s.mustAPI(ctx, t, http.MethodDelete, "/users/grace", nil, http.StatusNoContent)
	testutil.EventuallyEvery(t, 100*time.Millisecond, 60*time.Second, "claim claim-grace deleted with user grace", func() error {
		if _, err := claims.Get(ctx, "claim-grace", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim claim-grace after deleting user grace: %v", err)
		}
		return nil
	})
}

// A start JupyterHub hands over while the service is down (a restart,
// a failover) is sent again until the service answers: the server starts
// once the service is back, and nothing fails.
func testStartWhileServiceDown(t *testing.T, s *stack) {
	ctx := t.Context()
	if err := s.service.stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.createUser(ctx, t, "heidi")
	s.startServer(ctx, t, "heidi", "", map[string]string{"profile": "default"})
	// The Spawner has tried and failed to connect at least once.
	testutil.EventuallyEvery(t, 100*time.Millisecond, 30*time.Second, "a failed start attempt for heidi", func() error {
		if !logContains(s.logPath("jupyterhub"), "spawnkit: starting heidi") {
			return errors.New("JupyterHub's log has no failed start attempt for heidi yet")
		}
		return nil
	})
	s.startService(ctx, t)
	s.waitServer(ctx, t, "heidi", "", 60*time.Second, "ready", ready)
	s.onePod(ctx, t, "heidi", "")
	s.mustAPI(ctx, t, http.MethodDelete, serverPath("heidi", ""), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, "heidi", "", 30*time.Second, "stopped", gone)
}

// waitNoPods waits until the server has no pod in the API server.
func waitNoPods(t *testing.T, s *stack, user, server string, timeout time.Duration) {
	t.Helper()
	testutil.EventuallyEvery(t, 100*time.Millisecond, timeout, user+":"+server+"'s pods gone", func() error {
		pods, err := s.podsOf(t.Context(), user, server)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if len(pods) > 0 {
			return fmt.Errorf("%s:%s still has pod %s", user, server, pods[0].Name)
		}
		return nil
	})
}
