package jupyterhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testutil"
)

// contractConfig is TestJupyterHub's addition to the hub's configuration:
// a pre_spawn_hook that
//
//   - refuses a start whose user options say "pre-spawn": "fail", so that
//     JupyterHub stops (and first polls) a server start() never ran for;
//   - does what JupyterHub 5.3's c.Spawner.apply_user_options =
//     {option: attribute} does, which 3.0 lacks, at the point of the spawn
//     where 5.3 runs it (after the authenticator's hooks, before
//     pre_spawn_hook's own work and start()): each mapped option becomes
//     the spawner attribute, a string the trait refuses coerced by its
//     from_string;
//   - writes get_env() as it stands just before start() to
//     env-<user>-<server>.json in the stack's directory.
const contractConfig = `
import json as _json
import os as _os

_apply_user_options = {
    "default_url": "default_url",
    "cpu_limit": "cpu_limit",
    "mem_limit": "mem_limit",
    "cmd": "cmd",
    "args": "args",
}


def _pre_spawn_hook(spawner):
    options = spawner.user_options or {}
    if options.get("pre-spawn") == "fail":
        raise RuntimeError("pre_spawn_hook refuses this start (test)")
    traits = spawner.traits()
    for key, value in options.items():
        attr = _apply_user_options.get(key)
        if attr is None:
            continue
        try:
            setattr(spawner, attr, value)
        except Exception:
            setattr(spawner, attr, traits[attr].from_string(value))
    path = _os.path.join(state_dir, "env-%s-%s.json" % (spawner.user.name, spawner.name))
    with open(path, "w") as f:
        _json.dump(spawner.get_env(), f)


c.Spawner.pre_spawn_hook = _pre_spawn_hook
`

// checkRoute: start() returns the server's URL, and JupyterHub routes the
// server's prefix to exactly that URL (the pod's IP and port), as the
// service reports it.
func checkRoute(t *testing.T, s *stack, user, server string, pod corev1.Pod) {
	t.Helper()
	ctx := t.Context()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/api/routes", s.proxyAPI), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+s.proxyToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var routes map[string]struct {
		Target string `json:"target"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&routes); err != nil {
		t.Fatalf("the proxy's routes: %v", err)
	}
	prefix := strings.TrimSuffix(userURL(user, server), "/")
	route, ok := routes[prefix]
	if !ok {
		t.Fatalf("the proxy has no route for %s: %v", prefix, routes)
	}
	want := fmt.Sprintf("http://%s:8888", pod.Status.PodIP)
	if route.Target != want {
		t.Errorf("JupyterHub routes %s to %s, want the URL start() returned, %s (pod %s)", prefix, route.Target, want, pod.Name)
	}
}

// JupyterHub 3.0 polls a spawner whose start() it never called: a
// pre_spawn_hook that fails makes it stop the server, and its stop polls
// first. poll says 0 (the contract's "not initialized"): the service does
// not know the server, and JupyterHub calls no stop.
func testPollBeforeStart(t *testing.T, s *stack) {
	ctx := t.Context()
	s.createUser(ctx, t, "ivan")
	// The hook fails at once, so JupyterHub answers the request itself
	// with the failure and the exit status poll gave.
	code, body, err := s.api(ctx, http.MethodPost, serverPath("ivan", ""), map[string]string{"profile": "default", "pre-spawn": "fail"})
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusInternalServerError || !strings.Contains(string(body), "[status=0]") {
		t.Errorf("starting ivan's server = %d %s, want JupyterHub's 500 with poll's exit status 0", code, body)
	}
	testutil.EventuallyEvery(t, 100*time.Millisecond, 30*time.Second, "JupyterHub's poll of ivan before any start", func() error {
		if !logContains(s.logPath("jupyterhub"), "spawnkit: poll of ivan before any start: the service does not know it (0)") {
			return errors.New("JupyterHub's log does not show the poll of ivan's server before any start")
		}
		return nil
	})
	s.waitServer(ctx, t, "ivan", "", 30*time.Second, "gone", gone)
	service := s.logPath("spawner-service")
	request := func(method string, more ...string) int {
		return logCount(service, append([]string{`"msg"="request"`, `"method"="` + method + `"`, `"path"="/v1/users/ivan/server"`}, more...)...)
	}
	// JupyterHub's stop polls, and so does its error message.
	if polls, unknown := request("GET"), request("GET", `"status"=404`); polls == 0 || unknown != polls {
		t.Errorf("the service answered %d polls of ivan's server, %d of them 404; want at least one, all 404", polls, unknown)
	}
	for _, method := range []string{"POST", "DELETE"} {
		if n := request(method); n != 0 {
			t.Errorf("the service received %d %s requests for ivan's server, want none", n, method)
		}
	}
}

// The pod's environment is get_env() as JupyterHub computed it for the
// start, every variable unchanged (JUPYTERHUB_OAUTH_ACCESS_SCOPES, which
// JupyterHub's sharing relies on, among them; a variable the service
// keeps in a Secret reads the same from it); and attributes set on the
// spawner before start(), as 5.3's apply_user_options sets them from user
// options, reach the pod. User options that are not strings (for such
// hooks) do not make the service refuse the start.
func testEnvAndUserOptions(t *testing.T, s *stack) {
	ctx := t.Context()
	s.createUser(ctx, t, "judy")
	s.startServer(ctx, t, "judy", "", map[string]any{
		"profile":     "default",
		"default_url": "/lab/tree/probe.ipynb",
		"cpu_limit":   "1.5",
		"mem_limit":   1 << 30,
		"cmd":         []string{"jupyterhub-singleuser"},
		"args":        []string{"--ServerApp.probe=1"},
	})
	s.waitServer(ctx, t, "judy", "", 60*time.Second, "ready", ready)
	data, err := os.ReadFile(filepath.Join(s.dir, "env-judy-.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	pod := s.onePod(ctx, t, "judy", "")
	c := pod.Spec.Containers[0]
	got := map[string]string{}
	for _, e := range c.Env {
		got[e.Name] = s.envValue(ctx, t, pod, e)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("pod %s: %s = %q, want get_env()'s %q", pod.Name, k, got[k], v)
		}
	}
	var scopes []string
	if err := json.Unmarshal([]byte(want["JUPYTERHUB_OAUTH_ACCESS_SCOPES"]), &scopes); err != nil || !slices.Contains(scopes, "access:servers!server=judy/") {
		t.Errorf("get_env()'s JUPYTERHUB_OAUTH_ACCESS_SCOPES = %q (%v), want JSON scopes with access:servers!server=judy/", want["JUPYTERHUB_OAUTH_ACCESS_SCOPES"], err)
	}
	t.Logf("pod %s has all %d variables of get_env(), %d in all", pod.Name, len(want), len(got))
	for k, v := range map[string]string{
		"JUPYTERHUB_DEFAULT_URL": "/lab/tree/probe.ipynb",
		"CPU_LIMIT":              "1.5",
		"MEM_LIMIT":              fmt.Sprint(1 << 30),
	} {
		if got[k] != v {
			t.Errorf("pod %s: %s = %q, want %q from the user options", pod.Name, k, got[k], v)
		}
	}
	// As KubeSpawner makes them of the same attributes: the container's
	// resources (the service's configuration sets none for the default
	// profile).
	if m, cpu := c.Resources.Limits.Memory().Value(), c.Resources.Limits.Cpu().MilliValue(); m != 1<<30 || cpu != 1500 {
		t.Errorf("pod %s: limits memory %d, cpu %dm; want the attributes' 1Gi and 1500m", pod.Name, m, cpu)
	}
	if cmd := append(slices.Clone(c.Command), c.Args...); !slices.Equal(cmd, []string{"jupyterhub-singleuser", "--ServerApp.probe=1"}) {
		t.Errorf("pod %s runs %q, want the cmd and args from the user options", pod.Name, cmd)
	}
	if !logContains(s.logPath("jupyterhub"), "user options of judy not sent to the service", "mem_limit") {
		t.Errorf("JupyterHub's log does not say judy's mem_limit option was kept from the service")
	}
	s.mustAPI(ctx, t, http.MethodDelete, serverPath("judy", ""), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, "judy", "", 30*time.Second, "stopped", gone)
}

// envValue is an env variable's value: its value, or the key of the
// Secret it refers to.
func (s *stack) envValue(ctx context.Context, t *testing.T, pod corev1.Pod, e corev1.EnvVar) string {
	t.Helper()
	if e.ValueFrom == nil {
		return e.Value
	}
	ref := e.ValueFrom.SecretKeyRef
	if ref == nil {
		t.Fatalf("pod %s: %s comes from %+v, not a value or a Secret", pod.Name, e.Name, e.ValueFrom)
	}
	secret, err := s.cluster.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s: %s from Secret %s: %v", pod.Name, e.Name, ref.Name, err)
	}
	return string(secret.Data[ref.Key])
}

// A stop while the start is in flight: the service is down, so the
// Spawner keeps sending the start; JupyterHub's start_timeout runs out and
// it stops the server while start() still runs. The stop cancels the
// start and sends its DELETE until the service is back; the start is
// never sent again, and no pod appears.
func testStopWhileStartIsRetried(t *testing.T, s *stack) {
	ctx := t.Context()
	if err := s.service.stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.createUser(ctx, t, "kim")
	s.startServer(ctx, t, "kim", "", map[string]string{"profile": "default"})
	hubLog := s.logPath("jupyterhub")
	testutil.EventuallyEvery(t, 200*time.Millisecond, hubStartTimeout+30*time.Second, "JupyterHub to give up on kim's start and stop it", func() error {
		if !logContains(hubLog, "kim's server failed to start in") {
			return errors.New("JupyterHub has not given up on kim's start yet")
		}
		if !logContains(hubLog, "spawnkit: stopping kim") {
			return errors.New("the Spawner has not tried to stop kim's server yet")
		}
		return nil
	})
	retries := logCount(hubLog, "spawnkit: starting kim")
	s.startService(ctx, t)
	s.waitServer(ctx, t, "kim", "", 30*time.Second, "stopped", gone)
	// Longer than the Spawner's longest wait between two start attempts
	// (service_retry_max_interval, 5 s). No signal exists: a start
	// cancelled by the stop ends without a word, so only a wait past the
	// next attempt it would have made shows that it made none.
	time.Sleep(7 * time.Second)
	if n := logCount(hubLog, "spawnkit: starting kim"); n != retries {
		t.Errorf("the Spawner tried to start kim %d more times after the stop", n-retries)
	}
	if n := logCount(s.logPath("spawner-service"), `"method"="POST"`, `"path"="/v1/users/kim/server"`); n != 0 {
		t.Errorf("the service received %d start requests for kim after the stop", n)
	}
	if n := logCount(s.logPath("spawner-service"), `"method"="DELETE"`, `"path"="/v1/users/kim/server"`); n != 1 {
		t.Errorf("the service received %d stops of kim, want 1", n)
	}
	waitNoPods(t, s, "kim", "", time.Second)
	t.Logf("the start was sent %d times before JupyterHub's start_timeout", retries+1)
}
