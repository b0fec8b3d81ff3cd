//go:build hubbench

// The hub bench (issue 47): the same burst of users through a real
// JupyterHub (Debian's 3.0) once with spawnkit (SpawnkitSpawner and
// cmd/spawnkit-service) and once with the real KubeSpawner 7.1, on this
// package's simulated cluster, back to back, then a table side by side.
// Behind the hubbench build tag, so that `make test` (go test ./...) never
// builds it; `make bench-hub` runs it (docs/performance.md, "Through
// JupyterHub against KubeSpawner").

package jupyterhub_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// benchOptions come from the environment (the make target's variables).
type benchOptions struct {
	// users start at once (SPAWNKIT_HUB_BENCH_USERS, default 1000).
	users int
	// order is "spawnkit-first", "kubespawner-first" or "alternate"
	// (SPAWNKIT_HUB_BENCH_ORDER, default alternate: spawnkit first in odd
	// repeats, KubeSpawner first in even ones).
	order string
	// repeats of both sides (SPAWNKIT_HUB_BENCH_REPEATS, default 2: with
	// alternate, both orders).
	repeats int
	// progress: every user follows its progress stream, as a user's
	// spawn page does (SPAWNKIT_HUB_BENCH_PROGRESS, default 1).
	progress bool
	// JupyterHub's Spawner.start_timeout and http_timeout for both
	// sides (SPAWNKIT_HUB_BENCH_START_TIMEOUT, _HTTP_TIMEOUT, in seconds;
	// default 300 and 30, the example's jupyterhub_config.py, as
	// zero-to-jupyterhub sets them).
	startTimeout, httpTimeout time.Duration
	// idle is how long every server runs, the hub left to its polls,
	// before the stops (SPAWNKIT_HUB_BENCH_IDLE, seconds, default 60; 0
	// leaves it out).
	idle time.Duration
	// serviceArgs are the spawnkit-service's flags: -v 0 (the stack's
	// tests run it at -v 1) and -concurrent-spawn-limit at the burst's
	// size (docs/z2jh.md), then SPAWNKIT_HUB_BENCH_SERVICE_ARGS, split at
	// spaces; its defaults otherwise.
	serviceArgs []string
	// kubeSpawnerPython is the python of a venv with KubeSpawner 7.1
	// (SPAWNKIT_KUBESPAWNER_PYTHON; internal/tools/kubespawner.sh makes
	// it and prints it).
	kubeSpawnerPython string
	// logs, when set (SPAWNKIT_HUB_BENCH_LOGS), is a directory that
	// keeps each side's logs (the hub's, the proxy's, the service's) as
	// <repeat>-<side>/: the bench's own temporary directories go.
	logs string
	// profile (SPAWNKIT_HUB_BENCH_PROFILE=1, with logs) runs each hub
	// under cProfile, whose stats go with the logs as hub.pstats: where
	// the hub's event loop spends a burst (a diagnostic: cProfile slows
	// the hub, so its table is not a result).
	profile bool
}

func benchOptionsFromEnv(t *testing.T) benchOptions {
	t.Helper()
	o := benchOptions{users: 1000, order: "alternate", repeats: 2, progress: true,
		startTimeout: 300 * time.Second, httpTimeout: 30 * time.Second, idle: time.Minute,
		kubeSpawnerPython: os.Getenv("SPAWNKIT_KUBESPAWNER_PYTHON")}
	num := func(name string, into *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive number", name, v)
			}
			*into = n
		}
	}
	num("SPAWNKIT_HUB_BENCH_USERS", &o.users)
	num("SPAWNKIT_HUB_BENCH_REPEATS", &o.repeats)
	start, http := int(o.startTimeout/time.Second), int(o.httpTimeout/time.Second)
	num("SPAWNKIT_HUB_BENCH_START_TIMEOUT", &start)
	num("SPAWNKIT_HUB_BENCH_HTTP_TIMEOUT", &http)
	o.startTimeout, o.httpTimeout = time.Duration(start)*time.Second, time.Duration(http)*time.Second
	if v := os.Getenv("SPAWNKIT_HUB_BENCH_IDLE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("SPAWNKIT_HUB_BENCH_IDLE=%q: want seconds, 0 or more", v)
		}
		o.idle = time.Duration(n) * time.Second
	}
	if v := os.Getenv("SPAWNKIT_HUB_BENCH_ORDER"); v != "" {
		o.order = v
	}
	if !slices.Contains([]string{"spawnkit-first", "kubespawner-first", "alternate"}, o.order) {
		t.Fatalf("SPAWNKIT_HUB_BENCH_ORDER=%q: want spawnkit-first, kubespawner-first or alternate", o.order)
	}
	// As docs/z2jh.md tells the operator of a class starting at once:
	// the service's start slots raised with concurrent_spawn_limit.
	o.serviceArgs = append([]string{"-v", "0", "-concurrent-spawn-limit", strconv.Itoa(o.users)},
		strings.Fields(os.Getenv("SPAWNKIT_HUB_BENCH_SERVICE_ARGS"))...)
	o.logs = os.Getenv("SPAWNKIT_HUB_BENCH_LOGS")
	if o.profile = os.Getenv("SPAWNKIT_HUB_BENCH_PROFILE") == "1"; o.profile && o.logs == "" {
		t.Fatal("SPAWNKIT_HUB_BENCH_PROFILE=1 needs SPAWNKIT_HUB_BENCH_LOGS, where the profiles are kept")
	}
	if v := os.Getenv("SPAWNKIT_HUB_BENCH_PROGRESS"); v != "" {
		o.progress = v != "0"
	}
	if o.kubeSpawnerPython == "" {
		t.Fatal("SPAWNKIT_KUBESPAWNER_PYTHON is not set: the python of a venv with KubeSpawner 7.1, which internal/tools/kubespawner.sh makes and prints (make bench-hub runs it)")
	}
	if _, err := os.Stat(o.kubeSpawnerPython); err != nil {
		t.Fatalf("SPAWNKIT_KUBESPAWNER_PYTHON: %v (internal/tools/kubespawner.sh makes the venv)", err)
	}
	return o
}

// sides is the order of the two sides in repeat rep (from 0).
func (o benchOptions) sides(rep int) []string {
	first := o.order == "spawnkit-first" || (o.order == "alternate" && rep%2 == 0)
	if first {
		return []string{"spawnkit", "KubeSpawner"}
	}
	return []string{"KubeSpawner", "spawnkit"}
}

// benchImage is the image of every pod on both sides (the simulated
// cluster pulls nothing).
const benchImage = "quay.io/jupyter/base-notebook:2024-05-27"

// hubSettings is the hub configuration both sides share: JupyterHub's
// own settings for a burst of o.users at once. concurrent_spawn_limit is
// the burst's size, so that no start is refused with 429 (JupyterHub's
// default is 100).
func (o benchOptions) hubSettings() string {
	settings := fmt.Sprintf(`
c.JupyterHub.log_level = "INFO"
c.JupyterHub.concurrent_spawn_limit = %d
c.JupyterHub.cleanup_servers = False
c.Spawner.start_timeout = %d
c.Spawner.http_timeout = %d
c.Spawner.poll_interval = 30
`, o.users, int(o.startTimeout/time.Second), int(o.httpTimeout/time.Second))
	if o.profile {
		// JupyterHub loads its config inside its running event loop,
		// whose thread is profiled; every 10 s the loop writes what the
		// profile has so far (the hub may not get to exit cleanly), next
		// to the config as hub.pstats, and profiles on.
		settings += `
import asyncio as _aio, cProfile as _cp, os as _os
_hub_profile = _cp.Profile()
_hub_profile_path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "hub.pstats")
def _dump_profile():
    _hub_profile.dump_stats(_hub_profile_path)
    _hub_profile.enable()
    _aio.get_running_loop().call_later(10, _dump_profile)
_aio.get_running_loop().call_later(10, _dump_profile)
_hub_profile.enable()
`
	}
	return settings
}

// TestHubBench runs the bench and prints its tables on stdout.
func TestHubBench(t *testing.T) {
	o := benchOptionsFromEnv(t)
	tl := requireTools(t)
	c := testcluster.Require(t, cluster)
	cw := newClusterWatch(t, c)
	users := make([]string, o.users)
	for i := range users {
		users[i] = fmt.Sprintf("bench-%04d", i)
	}
	var all []sideResult
	for rep := range o.repeats {
		var pair []sideResult
		for _, side := range o.sides(rep) {
			t.Run(fmt.Sprintf("%d-%s", rep+1, side), func(t *testing.T) {
				if n := cw.podCount(); n > 0 {
					t.Fatalf("%d pods left in %s before the run", n, namespace)
				}
				ac := newAPICounter(t, c, t.TempDir())
				var h benchHub
				if side == "spawnkit" {
					h = startSpawnkitHub(t, tl, c, ac, o)
				} else {
					h = startKubeSpawnerHub(t, tl, c, ac, o)
				}
				begin := time.Now()
				r := runBurst(t, h, cw, ac, users, o)
				t.Logf("%s: %d users in %s", side, o.users, time.Since(begin).Round(time.Second))
				if o.logs != "" {
					keepLogs(t, h.s.dir, filepath.Join(o.logs, fmt.Sprintf("%d-%s", rep+1, side)))
				}
				pair = append(pair, r)
			})
			if t.Failed() {
				t.FailNow()
			}
		}
		fmt.Printf("\n## Repeat %d of %d: %s first\n\n", rep+1, o.repeats, pair[0].side)
		printTable(o, [][]sideResult{pair})
		printCauses(fmt.Sprintf("repeat %d", rep+1), pair)
		all = append(all, pair...)
	}
	if o.repeats > 1 {
		var reps [][]sideResult
		for i := 0; i+1 < len(all); i += 2 {
			reps = append(reps, all[i:i+2])
		}
		fmt.Printf("\n## Median of %d repeats (min to max in brackets)\n\n", o.repeats)
		printTable(o, reps)
		printCauses(fmt.Sprintf("all %d repeats", o.repeats), all)
	}
}

// startSpawnkitHub runs the package's stack (configurable-http-proxy,
// JupyterHub with SpawnkitSpawner, the service) with the bench's
// settings: the service reaches the cluster through ac.
func startSpawnkitHub(t *testing.T, tl tools, c *testcluster.Cluster, ac *apiCounter, o benchOptions) benchHub {
	t.Helper()
	config := filepath.Join(t.TempDir(), "spawner-service.yaml")
	writeFile(t, config, fmt.Sprintf("namespace: %s\nimage: %s\nport: 8888\nstart_timeout: %d\n",
		namespace, benchImage, int(o.startTimeout/time.Second)))
	s := newStack(t, tl, c, stackOptions{
		hubConfig: o.hubSettings(), serviceConfig: config, kubeconfig: ac.kubeconfig, serviceArgs: o.serviceArgs})
	return benchHub{side: "spawnkit", s: s, service: s.service}
}

// startKubeSpawnerHub runs configurable-http-proxy and JupyterHub with
// KubeSpawner from o.kubeSpawnerPython's venv, configured as the spawnkit
// side: the same hub settings, namespace, image and port. KubeSpawner
// finds the cluster through $KUBECONFIG (kubernetes_asyncio's
// load_kube_config, outside a pod), ac's.
func startKubeSpawnerHub(t *testing.T, tl tools, c *testcluster.Cluster, ac *apiCounter, o benchOptions) benchHub {
	t.Helper()
	s := &stack{
		tools: tl, cluster: c, dir: t.TempDir(),
		venv:         venv{dir: filepath.Dir(filepath.Dir(o.kubeSpawnerPython)), python: o.kubeSpawnerPython},
		serviceToken: randomToken(), adminToken: randomToken(), proxyToken: randomToken(),
	}
	for _, p := range []*int{&s.proxyPort, &s.proxyAPI, &s.hubAPI} {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		*p = port
	}
	t.Cleanup(func() {
		for _, p := range []*process{s.hub, s.proxy} {
			if p != nil {
				if err := p.stop(15 * time.Second); err != nil {
					t.Error(err)
				}
			}
		}
		if t.Failed() {
			for _, name := range []string{"configurable-http-proxy", "jupyterhub"} {
				t.Logf("--- %s.log (last 80 lines) ---\n%s", name, logTail(s.logPath(name), 80))
			}
		}
	})
	spawner := fmt.Sprintf(`c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.KubeSpawner.namespace = %q
c.KubeSpawner.image = %q
c.KubeSpawner.port = 8888
`, namespace, benchImage)
	config := s.hubConfigFile("hubbench_test.go", spawner, "c.JupyterHub.allow_named_servers = True\n"+o.hubSettings())
	writeFile(t, filepath.Join(s.dir, "jupyterhub_config.py"), config)
	// Outside a pod load_incluster_config fails and kubernetes_asyncio
	// reads $KUBECONFIG. Inside one (a CI runner), it would find the
	// runner's own cluster, a non-loopback address: an empty service
	// host makes it fail there too.
	t.Setenv("KUBECONFIG", ac.kubeconfig)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	ctx := t.Context()
	s.startProxy(ctx, t)
	s.startHub(ctx, t)
	// The version internal/tools/kubespawner.sh pins.
	if !logContains(s.logPath("jupyterhub"), "Using Spawner: kubespawner.spawner.KubeSpawner-7.1.0") {
		t.Fatalf("JupyterHub does not say it uses KubeSpawner 7.1.0:\n%s", logTail(s.logPath("jupyterhub"), 40))
	}
	return benchHub{side: "KubeSpawner", s: s}
}

// printTable prints one row per measure: each side's value (the median
// over reps, with min and max, when more than one) and spawnkit's over
// KubeSpawner's.
func printTable(o benchOptions, reps [][]sideResult) {
	type row struct {
		name  string
		value func(sideResult) (float64, bool)
		unit  string
	}
	secs := func(f func(sideResult) time.Duration) func(sideResult) (float64, bool) {
		return func(r sideResult) (float64, bool) { return f(r).Seconds(), true }
	}
	millis := func(f func(sideResult) time.Duration) func(sideResult) (float64, bool) {
		return func(r sideResult) (float64, bool) { return float64(f(r)) / float64(time.Millisecond), r.progressN > 0 }
	}
	perStart := func(f func(map[string]int) int, calls func(sideResult) map[string]int) func(sideResult) (float64, bool) {
		return func(r sideResult) (float64, bool) { return float64(f(calls(r))) / float64(r.users), true }
	}
	pods := func(verb string) func(map[string]int) int {
		return func(m map[string]int) int { return m[verb+" pods"] }
	}
	mib := func(f func(sideResult) uint64) func(sideResult) (float64, bool) {
		return func(r sideResult) (float64, bool) { return float64(f(r)) / (1 << 20), f(r) > 0 }
	}
	svc := func(f func(sideResult) time.Duration) func(sideResult) (float64, bool) {
		return func(r sideResult) (float64, bool) { return f(r).Seconds(), r.side == "spawnkit" }
	}
	perMinute := func(f func(sideResult) float64) func(sideResult) (float64, bool) {
		return func(r sideResult) (float64, bool) {
			if r.idle == 0 {
				return 0, false
			}
			return f(r) / r.idle.Minutes(), true
		}
	}
	startCalls := func(r sideResult) map[string]int { return r.startCalls }
	stopCalls := func(r sideResult) map[string]int { return r.stopCalls }
	rows := []row{
		{"users", func(r sideResult) (float64, bool) { return float64(r.users), true }, ""},
		{"failed starts", func(r sideResult) (float64, bool) { return float64(r.failed), true }, ""},
		{"all ready, from the first start request", secs(func(r sideResult) time.Duration { return r.allReady }), "s"},
		{"one start until ready, p50", secs(func(r sideResult) time.Duration { return r.start50 }), "s"},
		{"one start until ready, p99", secs(func(r sideResult) time.Duration { return r.start99 }), "s"},
		{"progress latency, p50", millis(func(r sideResult) time.Duration { return r.progress50 }), "ms"},
		{"progress latency, p99", millis(func(r sideResult) time.Duration { return r.progress99 }), "ms"},
		{"pod events seen in progress streams", func(r sideResult) (float64, bool) { return float64(r.progressN), o.progress }, ""},
		{"progress streams broken", func(r sideResult) (float64, bool) { return float64(r.brokenStreams), o.progress }, ""},
		{"API requests per minute, all running", perMinute(func(r sideResult) float64 { return float64(sumCalls(r.idleCalls)) }), "requests"},
		{"hub CPU per minute, all running", perMinute(func(r sideResult) float64 { return r.hubCPUIdle.Seconds() }), "s"},
		{"service CPU per minute, all running", func(r sideResult) (float64, bool) {
			v, ok := perMinute(func(r sideResult) float64 { return r.svcCPUIdle.Seconds() })(r)
			return v, ok && r.side == "spawnkit"
		}, "s"},
		{"stop-all until every pod is gone", func(r sideResult) (float64, bool) { return r.stopAll.Seconds(), r.podsLeft == 0 }, "s"},
		{"pods left 5 min after stop-all (then deleted)", func(r sideResult) (float64, bool) { return float64(r.podsLeft), true }, ""},
		{"API requests per start", perStart(sumCalls, startCalls), "requests"},
		{"  of which POST pods", perStart(pods("POST"), startCalls), "requests"},
		{"API requests per stop", perStart(sumCalls, stopCalls), "requests"},
		{"  of which DELETE pods", perStart(pods("DELETE"), stopCalls), "requests"},
		{"hub CPU during the starts", secs(func(r sideResult) time.Duration { return r.hubCPUStart }), "s"},
		{"hub CPU during the stops", secs(func(r sideResult) time.Duration { return r.hubCPUStop }), "s"},
		{"hub RSS when all were ready", mib(func(r sideResult) uint64 { return r.hubReady }), "MiB"},
		{"hub RSS peak", mib(func(r sideResult) uint64 { return r.hubPeak }), "MiB"},
		{"service CPU during the starts", svc(func(r sideResult) time.Duration { return r.svcCPUStart }), "s"},
		{"service CPU during the stops", svc(func(r sideResult) time.Duration { return r.svcCPUStop }), "s"},
		{"service RSS peak", mib(func(r sideResult) uint64 { return r.svcPeak }), "MiB"},
		{"hub + service CPU during the starts", secs(func(r sideResult) time.Duration { return r.hubCPUStart + r.svcCPUStart }), "s"},
	}
	// cell is the median over reps of one side's value, with its range.
	cell := func(side string, v func(sideResult) (float64, bool)) (float64, string) {
		var xs []float64
		for _, pair := range reps {
			for _, r := range pair {
				if x, ok := v(r); ok && r.side == side {
					xs = append(xs, x)
				}
			}
		}
		if len(xs) == 0 {
			return 0, "-"
		}
		slices.Sort(xs)
		med := xs[len(xs)/2]
		if len(xs)%2 == 0 {
			med = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
		}
		s := strconv.FormatFloat(med, 'f', prec(med), 64)
		if len(xs) > 1 {
			s += fmt.Sprintf(" [%s–%s]", strconv.FormatFloat(xs[0], 'f', prec(xs[0]), 64), strconv.FormatFloat(xs[len(xs)-1], 'f', prec(xs[len(xs)-1]), 64))
		}
		return med, s
	}
	var b strings.Builder
	fmt.Fprintln(&b, "| measure | unit | spawnkit | KubeSpawner 7.1 | spawnkit / KubeSpawner |")
	fmt.Fprintln(&b, "|---|---|---|---|---|")
	for _, r := range rows {
		sk, skCell := cell("spawnkit", r.value)
		ks, ksCell := cell("KubeSpawner", r.value)
		ratio := "-"
		if skCell != "-" && ksCell != "-" && ks != 0 && r.unit != "" {
			ratio = fmt.Sprintf("%.2f×", sk/ks)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.name, r.unit, skCell, ksCell, ratio)
	}
	fmt.Print(b.String())
	for _, pair := range reps[len(reps)-1:] {
		for _, r := range pair {
			fmt.Printf("\n%s's API requests: starts %v; all running %v; stops %v\n", r.side, r.startCalls, r.idleCalls, r.stopCalls)
		}
	}
}

// prec is the decimals a value is printed with: three significant
// digits, whole numbers from 100 up.
func prec(x float64) int {
	switch {
	case x == float64(int64(x)) || x >= 100:
		return 0
	case x >= 10:
		return 1
	case x >= 1:
		return 2
	default:
		return 3
	}
}

// keepLogs copies the *.log (and *.pstats) files of dir into to (made
// if need be).
func keepLogs(t *testing.T, dir, to string) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if more, _ := filepath.Glob(filepath.Join(dir, "*.pstats")); err == nil {
		logs = append(logs, more...)
	}
	if err == nil {
		err = os.MkdirAll(to, 0o755)
	}
	for _, l := range logs {
		if err != nil {
			break
		}
		var data []byte
		if data, err = os.ReadFile(l); err == nil {
			err = os.WriteFile(filepath.Join(to, filepath.Base(l)), data, 0o644)
		}
	}
	if err != nil {
		t.Errorf("keeping the logs in %s: %v", to, err)
		return
	}
	t.Logf("logs kept in %s", to)
}
