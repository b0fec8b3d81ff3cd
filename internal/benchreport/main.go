// Command benchreport measures spawnkit side by side with raw client-go on
// a simulated cluster (internal/testcluster) and prints a table of ratios,
// min/median/max over repeats, with each row's goal and whether its median
// meets it; it writes the same as JSON. It is a program, not a test:
// `make bench-report` runs it, `make test` never does.
//
// Rows come in groups (-only selects some):
//
//   - start: spawner.Spawner.Start of -sizes servers at once (100 and
//     1,000 by default), without progress (no OnProgress, so no event
//     informer), against raw client-go doing the minimum equivalent
//     work: Pods().Create (retried on timeouts, 5xx and broken streams, as
//     spawnkit retries them), then waiting for Ready through a plain pod
//     informer.
//   - manager: the same through manager.Manager as a hub drives it
//     (manager.New, Start, Spawn each server, follow Watch until every
//     server is running), against the same raw work plus an event
//     informer on the namespace: the Manager reports each start's
//     progress, pod events included, so watching them is part of the
//     equivalent work. The Manager keeps its default
//     ConcurrentSpawnLimit (100, JupyterHub's concurrent_spawn_limit)
//     unless -spawn-limit says otherwise.
//   - clusters (clusters.go): what one cluster more costs spawns on the
//     first (issue 31). It starts a second simulated cluster, B, and
//     measures Manager.Spawn of 100 servers at once (-quick: 20) on
//     cluster A in four configurations, each run a child process as the
//     manager rows, their order alternating between repeats: a Manager
//     of A alone, B idle; a Manager of A and B (Options.Clusters), B
//     idle; the same while -busy-b servers (20) cycle on B through it
//     (start, running, stop, placed on B by a profile naming
//     kubernetes_cluster b); and, the control of that, a Manager each
//     for A and B in one process, B as busy. Rows: throughput and the
//     median time to running on A, as the ratios two-idle/alone and
//     two-busy/separate-busy (goals: at least 0.9× and at most 1.15×)
//     and two-busy/alone (no goal: B's control plane shares the 2
//     cores).
//   - poll: spawner.Spawner.Poll of a running server, with -poll-pods
//     pods (10,000 by default) in the cache, against a raw lister Get and
//     a readiness and exit check: ns/op and allocs/op over a timed loop,
//     once the machine is quiet.
//   - heap (cache.go): heap per cached pod, 10,000 realistic running pods
//     decoded from the API server, Registry.Pods against a plain pod
//     informer (store, namespace index and, for spawnkit, its uid map).
//   - events (events.go): the heap an event cache keeps for 50,000 events
//     in a namespace, half about 10 server pods and half about 2,500
//     other pods, created through the API server: Registry.Pods and
//     Registry.Events against a plain event informer (KubeSpawner #913).
//   - progress (progress.go): latency p50/p99 from posting a pod event to
//     its arrival in a start's progress Stream, against a raw event
//     informer's handler.
//   - detection (detect.go): failure-detection latency p50/p99 from a
//     running server's pod turning Failed to Manager.Watch saying so,
//     against a raw pod informer's handler.
//   - recovery (recovery.go): a cold Manager over 10,000 running servers
//     until it lists them all running with their URLs, against a raw
//     informer sync and a map of URLs built from the pods.
//   - orphan (orphan.go): orphan.List over 100,000 pods against 100,000
//     known servers (1% stopped, and all stopped), served from a synced
//     Registry, against a map diff over a plain informer's store. It runs
//     on client-go's fake clientset: creating 100,000 real pods would take
//     many minutes and change nothing the row measures. It runs in a child
//     process with a heap of its own, not one shaped by the rows before,
//     once the machine is quiet (the cluster may still be digesting the
//     deletions of the rows before: less than 10% of the CPUs busy for
//     5 s, at most 3 minutes).
//   - watches (watches.go): WATCH requests opened for 200 users in
//     user-namespace mode, spawnkit's Manager against per-namespace raw
//     informers.
//   - service (service.go): one cmd/spawnkit-service process, built
//     with go build and run as a child against the cluster, with
//     -service-servers servers (10,000) started through its API as a hub
//     starts them (-service-in-flight at once, 1,000): the creation rate
//     with the default client limit and without one, and where a start's
//     time went (the Manager's phase metrics, the API server's request
//     latencies); its RSS right after the burst and after
//     -service-settle (5 minutes) against the same after a restart on
//     the same servers; its CPU and API requests idle; restart to ready
//     against a raw informer sync; and its CPU and the polls' latency
//     under a hub's polling (every server every 30 s) for
//     -service-window (5 minutes). At 10,000 servers a repeat takes
//     about 40 minutes (two bursts, three windows and two settles);
//     -quick: 300 servers, 30 s windows.
//
// Each start and manager run also yields, for both sides: API requests per
// spawn by verb and resource (a counting RoundTripper wrapped around the
// client's transport with rest.Config.Wrap; the table shows pod creates
// and all requests, the JSON every verb and resource), client CPU per
// spawn (getrusage user+system time of the process over the run, divided
// by the spawns), and, in the JSON and on stderr, phase timings: when the
// creates were answered, when the spawns were done, and when the pods
// turned Ready by the cluster's clock. So that only the measured client is
// counted, each side's spawn run is a child process of this program (the
// simulated cluster keeps an in-process informer of its own); the child
// connects through the cluster's kubeconfig, warms its informers, and
// reports its clock, CPU and requests for the spawns alone. -cpuprofile
// writes a CPU profile of each such window.
//
// With -tracing (make bench-report passes it) the start and manager rows
// get a third side per repeat, spawnkit with tracing on: an SDK
// TracerProvider whose batch span processor (the SDK's defaults) exports
// over OTLP gRPC to a Jaeger this program starts on 127.0.0.1
// (testutil.LaunchJaeger; its binary is $SPAWNKIT_JAEGER or make
// jaeger's). The three sides take turns at going first. Its window ends
// with a ForceFlush, so the exports of the window's spans are in its CPU,
// and the warm-up's spans are flushed before the clock. After the run
// the parent reads the run's traces back from Jaeger's query API
// (GET /api/traces?service=..., a service name per run): a run none of
// whose traces holds its root span (spawnkit.start or spawnkit.spawn)
// with a phase span under it has failed, so a broken exporter cannot
// report a cheap "on". Rows (tracing.go): client CPU per spawn with
// tracing on against raw client-go; the same against spawnkit with
// tracing off (on/off; the raw column then holds "off"); tracing's cost,
// on minus off in µs of CPU per spawn; and the spans exported per spawn.
// The last two have no raw side: their ratio columns hold their own
// values' min/median/max, without ×. The rows without tracing are made
// as before, from the other two sides.
//
// Honesty rules: in spawn rows both sides get the same client rate limit
// (-client-qps: none by default), informers synced before the clock starts (both
// sides receive protobuf; spawnkit's Registry asks for it without gzip
// and decodes only what its cache keeps, raw's typed client takes what
// client-go's defaults give), and a fresh namespace per run, deleted and
// gone (then a pause, and a wait until the machine is quiet) before the
// next run starts; the order of the two
// sides alternates between repeats. The cluster's scheduler and kwok run
// without client rate limits (see testcluster), so that they keep up with
// the clients' creates and the spawn rows measure the clients. A run of
// 100 spawns lasts about 2 s, and its ratios scatter most between
// repeats, so those rows are repeated 3×repeats times (15 by default). Every ratio is spawnkit/raw, taken
// per repeat and summarised; each row says whether higher or lower is
// better (a throughput ratio above 1 means spawnkit is faster, a CPU
// ratio above 1 that it spends more). A run that fails is listed under
// the table and its repeat has no ratio; the other side still runs.
//
// The raw side creates the very pod spawnkit renders for the same server
// (spawner.Plan, before the clock; spawnkit renders its own inside the
// measured window), so both send and receive the same bytes and only the
// client differs: the pod a config asks for is the hub's choice, not
// spawnkit's overhead. Inside the window the raw side copies that pod
// (DeepCopy) before creating it: the least a hub does to have a pod
// object of its own per spawn is to copy its template. Before the clock
// each side makes one spawn of a server of its own (a running hub has
// spawned before: its code, connection and heap are warm), then the
// setup's garbage is collected and returned to the OS. -raw-minimal-pod, -raw-events and -no-events are
// diagnostics, off in a report: the raw side creates a minimal pod (a
// third of the bytes), or watches pod events in the start rows too, or
// spawnkit runs without events (events_enabled false; then neither side
// of the manager rows watches them).
//
//	go run ./internal/benchreport -repeats 5 -json bench-report.json
//	go run ./internal/benchreport -quick -only start
//	go run ./internal/benchreport -quick -only start,manager -tracing
//	go run ./internal/benchreport -only manager -sizes 1000 -cpuprofile /tmp/spawn
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

const image = "quay.io/jupyter/base-notebook:2024-01-01"

// Producer makes one group of rows. It gets the running cluster and the
// number of repeats, and returns its rows with one value per repeat on
// each side (Measure.Add); main summarises them.
type Producer func(ctx context.Context, env *Env, repeats int) ([]Measure, error)

// producers are the row groups, in the order they run and print; -only
// selects them by name.
var producers = []group{
	{"start", measureStart},
	{"manager", measureManager},
	{"clusters", measureClusters},
	{"poll", measurePoll},
	{"heap", measureHeap},
	{"events", measureEventFlood},
	{"progress", measureProgress},
	{"detection", measureDetection},
	{"recovery", measureRecovery},
	{"orphan", measureOrphanDiff},
	{"watches", measureWatches},
	{"service", measureService},
}

type group struct {
	name string
	fn   Producer
}

// Env is what a Producer works with. Its fields are read-only.
type Env struct {
	Cluster *testcluster.Cluster
	// Config is the cluster's admin config with the spawn rows' rate
	// limit (ClientQPS), and Client a clientset built from it.
	Config *rest.Config
	Client kubernetes.Interface
	// ClientQPS is the client-side rate limit of both sides of the spawn
	// rows (-client-qps): -1, none (spawnkit-service's default), or a
	// cap with a burst of twice it.
	ClientQPS float64
	// Sizes are the concurrent spawns of the spawn rows, one row each.
	Sizes []int
	// PollPods is how many pods the poll rows keep in the cache.
	PollPods int
	// Quick is set for a smoke run: producers keep their work small.
	Quick bool
	// SpawnLimit is the Manager's ConcurrentSpawnLimit (0: its default).
	SpawnLimit int
	// BusyB is how many servers the clusters rows keep cycling on
	// cluster B.
	BusyB int
	// Self is this program's executable, for child runs.
	Self string
	// CPUProfile, when set, is the path prefix of CPU profiles of the
	// measured windows.
	CPUProfile string
	// MemProfile, when set, is the path prefix of heap profiles written
	// before and after each measured window (allocations sampled every
	// 16 KB in the child).
	MemProfile string
	// RawPlannedPod (on in a report) makes the raw side create the very
	// pod spawnkit renders, so only the client differs. Diagnostics for
	// spawn rows, off in a report: NoEvents runs spawnkit without events
	// (events_enabled false, and no raw event informer in the manager
	// rows), RawEvents gives the raw side of the start rows an event
	// informer too.
	RawPlannedPod, NoEvents, RawEvents bool
	// Tracing adds a third side to the start and manager rows: spawnkit
	// with tracing on, exporting to Jaeger (started by run).
	Tracing bool
	Jaeger  *testutil.Jaeger
	// Service shapes the service rows.
	Service ServiceOptions
}

func main() {
	flags := flag.NewFlagSet("benchreport", flag.ExitOnError)
	sizes := flags.String("sizes", "100,1000", "concurrent spawns of the start and manager rows, comma-separated: one row each")
	repeats := flags.Int("repeats", 5, "runs per side and row (the spawn rows are noisy on 2 cores: a median of 5 moves less than one of 3; the rows of 100 spawns run 3×repeats times)")
	quick := flags.Bool("quick", false, "a smoke run: small sizes (20), 1,000 poll pods, 5 busy servers on cluster B, unless -sizes, -poll-pods or -busy-b are given")
	only := flags.String("only", "", "run only these row groups, comma-separated: "+groupNames())
	pollPods := flags.Int("poll-pods", 10_000, "pods in the cache for the poll rows")
	clientQPS := flags.Float64("client-qps", -1, "client-side rate limit of both sides of the start and manager rows: -1 none (spawnkit-service's default), or a cap in requests a second with bursts of twice it (50: the service's default before issue 47)")
	spawnLimit := flags.Int("spawn-limit", 0, "the Manager's ConcurrentSpawnLimit in manager and clusters rows (0: its default, 100; negative: none)")
	busyB := flags.Int("busy-b", 20, "servers the clusters rows keep cycling (start, running, stop) on cluster B while they measure cluster A (-quick: 5)")
	jsonPath := flags.String("json", "bench-report.json", "write the report here as JSON (\"\" for none)")
	cpuProfile := flags.String("cpuprofile", "", "write a CPU profile of each measured window to files starting with this path")
	memProfile := flags.String("memprofile", "", "write heap profiles before and after each measured window to files starting with this path")
	rawMinimal := flags.Bool("raw-minimal-pod", false, "diagnostic: the raw side creates a minimal pod instead of the pod spawnkit renders")
	noEvents := flags.Bool("no-events", false, "diagnostic: spawnkit runs without events (events_enabled false), and the raw side of the manager rows without its event informer")
	rawEvents := flags.Bool("raw-events", false, "diagnostic: the raw side of the start rows watches pod events too")
	tracing := flags.Bool("tracing", false, "add to the start and manager rows a run of spawnkit with tracing on, exporting over OTLP gRPC to a Jaeger this program starts (make bench-report passes it; $SPAWNKIT_JAEGER or make jaeger's binary)")
	var svc ServiceOptions
	flags.IntVar(&svc.Servers, "service-servers", 10_000, "servers the service rows start through one spawnkit-service (-quick: 300)")
	flags.IntVar(&svc.InFlight, "service-in-flight", 1000, "starts the service rows' hub keeps in flight during the burst")
	flags.DurationVar(&svc.Settle, "service-settle", 5*time.Minute, "how long the service settles after its burst, and after its restart, before its steady RSS is read (-quick: 30s)")
	flags.DurationVar(&svc.Window, "service-window", 5*time.Minute, "length of the service's idle window and of its polling window (-quick: 30s)")
	flags.Float64Var(&svc.PollRate, "service-poll-rate", 0, "polls per second of the polling window (0: every server every 30 s)")
	flags.IntVar(&svc.Repeats, "service-repeats", 3, "repeats of the service rows, instead of -repeats: one takes about 40 minutes at 10,000 servers (-quick: 1)")
	flags.StringVar(&svc.Profile, "service-profile", "", "diagnostic: build the service with a pprof endpoint and write, to files starting with this path, its heap profiles once the burst has settled and once the restart has, and its CPU profile of the polling window (the build samples every 4 KiB allocated, and profiling costs CPU: the CPU rows are then not a report's)")
	child := flags.String("child", "", "internal: run one side of a spawn run, described by this JSON")
	orphanChild := flags.Bool("orphan-child", false, "internal: measure the orphan rows in this process (with -repeats and -quick) and write them as JSON")
	_ = flags.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *orphanChild {
		if err := runOrphanChild(ctx, *repeats, *quick, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport orphan child:", err)
			os.Exit(1)
		}
		return
	}
	if *child != "" {
		if strings.Contains(*child, `"mem_profile"`) {
			// Set before the child allocates anything it measures.
			runtime.MemProfileRate = 16 << 10
		}
		if err := runChild(ctx, *child, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport child:", err)
			os.Exit(1)
		}
		return
	}
	set := map[string]bool{}
	flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick && !set["sizes"] {
		*sizes = "20"
	}
	if *quick && !set["poll-pods"] {
		*pollPods = 1000
	}
	if *quick && !set["busy-b"] {
		*busyB = 5
	}
	if *quick && !set["service-servers"] {
		svc.Servers = 300
	}
	if *quick && !set["service-repeats"] {
		svc.Repeats = 1
	}
	if *quick && !set["service-settle"] {
		svc.Settle = 30 * time.Second
	}
	if *quick && !set["service-window"] {
		svc.Window = 30 * time.Second
	}
	env := &Env{PollPods: *pollPods, Quick: *quick, SpawnLimit: *spawnLimit, ClientQPS: *clientQPS, BusyB: *busyB, CPUProfile: *cpuProfile, MemProfile: *memProfile,
		RawPlannedPod: !*rawMinimal, NoEvents: *noEvents, RawEvents: *rawEvents, Tracing: *tracing, Service: svc}
	groups, err := parseConfig(env, *sizes, *only, *repeats)
	if err == nil {
		env.Self, err = os.Executable()
	}
	if err == nil {
		err = run(ctx, env, groups, *repeats, *jsonPath)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func groupNames() string {
	names := make([]string, len(producers))
	for i, p := range producers {
		names[i] = p.name
	}
	return strings.Join(names, ",")
}

// parseConfig checks the flags and returns the groups to run.
func parseConfig(env *Env, sizes, only string, repeats int) ([]string, error) {
	if repeats < 1 {
		return nil, fmt.Errorf("-repeats must be at least 1 (got %d)", repeats)
	}
	if env.PollPods < 1 {
		return nil, fmt.Errorf("-poll-pods must be at least 1 (got %d)", env.PollPods)
	}
	if env.BusyB < 1 {
		return nil, fmt.Errorf("-busy-b must be at least 1 (got %d)", env.BusyB)
	}
	if s := env.Service; s.Servers < 1 || s.InFlight < 1 || s.Settle < 0 || s.Window <= 0 || s.PollRate < 0 {
		return nil, fmt.Errorf("-service-servers %d, -service-in-flight %d, -service-settle %v, -service-window %v, -service-poll-rate %g: want positive numbers (a settle of 0 is allowed)",
			s.Servers, s.InFlight, s.Settle, s.Window, s.PollRate)
	}
	for f := range strings.SplitSeq(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sizes: %q is not a positive number", f)
		}
		env.Sizes = append(env.Sizes, n)
	}
	var groups []string
	for g := range strings.SplitSeq(only, ",") {
		if g = strings.TrimSpace(g); g == "" {
			continue
		}
		if !slices.ContainsFunc(producers, func(p group) bool { return p.name == g }) {
			return nil, fmt.Errorf("-only: no row group %q (there are %s)", g, groupNames())
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		for _, p := range producers {
			groups = append(groups, p.name)
		}
	}
	return groups, nil
}

// Report is what the JSON file holds.
type Report struct {
	Date     time.Time `json:"date"`
	Machine  Machine   `json:"machine"`
	Repeats  int       `json:"repeats"`
	Measures []Measure `json:"measures"`
	// Errors are the groups that failed, with why; their rows are
	// missing.
	Errors map[string]string `json:"errors,omitempty"`
}

// Machine says where the report was made.
type Machine struct {
	Hostname  string `json:"hostname"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
}

// Better says which way a measure improves.
type Better string

const (
	Higher Better = "higher"
	Lower  Better = "lower"
)

// Goal is the target of a row: Value for the median of Of, which is
// "ratio" (spawnkit/raw) or "spawnkit" (spawnkit's own value). It holds
// when the median is at least Value (Better higher) or at most Value
// (Better lower).
type Goal struct {
	Of    string  `json:"of"`
	Value float64 `json:"value"`
}

// Measure is one row: the value of each side per repeat, and the ratio
// spawnkit/raw per repeat summarised. Better says which direction is an
// improvement, for the values and the ratio alike.
type Measure struct {
	Group    string    `json:"group"`
	Name     string    `json:"name"`
	Unit     string    `json:"unit"`
	Better   Better    `json:"better"`
	Goal     *Goal     `json:"goal,omitempty"`
	Spawnkit []float64 `json:"spawnkit"`
	Raw      []float64 `json:"raw"`
	Ratio    Summary   `json:"ratio"`
	// Holds says whether the goal's median meets it (nil without a goal).
	Holds *bool `json:"holds,omitempty"`
	// Failed are the repeats that failed, with why; they have no values.
	Failed []string `json:"failed,omitempty"`
	// Detail is any further data a row has, such as requests per spawn by
	// verb and resource, per side and repeat.
	Detail any `json:"detail,omitempty"`
}

// Add records one repeat.
func (m *Measure) Add(spawnkit, raw float64) {
	m.Spawnkit, m.Raw = append(m.Spawnkit, spawnkit), append(m.Raw, raw)
}

// finish computes the ratio summary and whether the goal holds. A repeat
// whose raw value is 0 has no ratio, unless spawnkit's is 0 too (ratio 1).
func (m *Measure) finish() {
	var ratios []float64
	for i := range min(len(m.Spawnkit), len(m.Raw)) {
		switch sk, raw := m.Spawnkit[i], m.Raw[i]; {
		case raw != 0:
			ratios = append(ratios, sk/raw)
		case sk == 0:
			ratios = append(ratios, 1)
		}
	}
	m.Ratio = summarize(ratios)
	if m.Goal == nil || len(m.Spawnkit) == 0 {
		return // no goal, or no values to judge
	}
	v := m.Ratio.Median
	if m.Goal.Of == "spawnkit" {
		v = summarize(m.Spawnkit).Median
	}
	holds := v >= m.Goal.Value
	if m.Better == Lower {
		holds = v <= m.Goal.Value
	}
	if m.Goal.Of == "ratio" && len(ratios) == 0 {
		holds = false
	}
	m.Holds = &holds
}

// Summary is min, median and max over repeats.
type Summary struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

func summarize(xs []float64) Summary {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return Summary{}
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Min: s[0], Median: med, Max: s[len(s)-1]}
}

func run(ctx context.Context, env *Env, groups []string, repeats int, jsonPath string) error {
	startCtx, cancel := context.WithTimeout(ctx, testcluster.StartTimeout)
	defer cancel()
	fmt.Fprintln(os.Stderr, "starting the simulated cluster...")
	cluster, err := testcluster.Start(startCtx, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 2})
	if err != nil {
		return fmt.Errorf("starting the simulated cluster: %w", err)
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: stopping the cluster:", err)
		}
	}()
	env.Cluster = cluster
	if env.Tracing && (slices.Contains(groups, "start") || slices.Contains(groups, "manager")) {
		j, stopJaeger, err := startJaeger(ctx)
		if err != nil {
			return fmt.Errorf("starting jaeger for -tracing: %w", err)
		}
		defer stopJaeger()
		env.Jaeger = j
	}
	env.Config = rest.CopyConfig(cluster.Config)
	setClientQPS(env.Config, env.ClientQPS) // the same for both sides
	if env.Client, err = kubernetes.NewForConfig(env.Config); err != nil {
		return err
	}

	host, _ := os.Hostname()
	report := Report{
		Date:    time.Now().UTC().Truncate(time.Second),
		Machine: Machine{Hostname: host, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()},
		Repeats: repeats,
	}
	var failed []error
	for _, p := range producers {
		if !slices.Contains(groups, p.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "== %s\n", p.name)
		ms, err := p.fn(ctx, env, repeats)
		if err != nil {
			// Keep the other groups' rows: a long run is not thrown away
			// for one failure.
			fmt.Fprintf(os.Stderr, "benchreport: %s: %v\n", p.name, err)
			if report.Errors == nil {
				report.Errors = map[string]string{}
			}
			report.Errors[p.name] = err.Error()
			failed = append(failed, fmt.Errorf("%s: %w", p.name, err))
			if ctx.Err() != nil {
				break
			}
		}
		for i := range ms {
			ms[i].Group = p.name
			ms[i].finish()
		}
		report.Measures = append(report.Measures, ms...)
	}
	printTable(os.Stdout, report)
	if jsonPath != "" {
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
		fmt.Fprintln(os.Stderr, "wrote", jsonPath)
	}
	return errors.Join(failed...)
}

// NewNamespace creates a namespace named prefix-<random>.
func (env *Env) NewNamespace(ctx context.Context, prefix string) (string, error) {
	ns, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-" + prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a namespace: %w", err)
	}
	return ns.Name, nil
}

// DeleteNamespace deletes ns and waits, up to timeout, until it is gone:
// a namespace whose pods are still being deleted would weigh on the next
// run.
func (env *Env) DeleteNamespace(ctx context.Context, ns string, timeout time.Duration) error {
	if err := env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("waiting for namespace %s to be deleted: %w", ns, err)
	}
	return nil
}

func printTable(out io.Writer, r Report) {
	fmt.Fprintf(out, "spawnkit vs raw client-go, %s, %s/%s, %d CPUs, %s, %d repeats (%d for the rows of %d spawns)\n\n",
		r.Date.Format(time.DateOnly), r.Machine.OS, r.Machine.Arch, r.Machine.CPUs, r.Machine.GoVersion, r.Repeats,
		spawnRepeats(shortSpawnRun, r.Repeats), shortSpawnRun)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tunit\tbetter\tspawnkit (median)\traw (median)\tratio min\tratio median\tratio max\tgoal\tholds")
	for _, m := range r.Measures {
		goal, holds := "-", "-"
		if g := m.Goal; g != nil {
			op := "≥"
			if m.Better == Lower {
				op = "≤"
			}
			goal = fmt.Sprintf("%s %s %s", g.Of, op, num(g.Value))
			if m.Goal.Of == "ratio" {
				goal += "×"
			}
			holds = "NO"
			if m.Holds != nil && *m.Holds {
				holds = "yes"
			}
			if len(m.Failed) > 0 {
				holds += fmt.Sprintf(" (%d failed)", len(m.Failed))
			}
		}
		if len(m.Raw) == 0 && len(m.Spawnkit) > 0 {
			// A row of spawnkit's own values (tracing's cost): no raw
			// side, no ratio; the ratio columns hold the values' spread,
			// without ×.
			v := summarize(m.Spawnkit)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Unit, m.Better,
				num(v.Median), num(v.Min), num(v.Median), num(v.Max), goal, holds)
			continue
		}
		if len(m.Spawnkit) == 0 {
			if m.Goal != nil {
				holds = fmt.Sprintf("- (%d failed)", len(m.Failed))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t%s\t%s\n", m.Name, m.Unit, m.Better, goal, holds)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s×\t%s×\t%s×\t%s\t%s\n", m.Name, m.Unit, m.Better,
			num(summarize(m.Spawnkit).Median), num(summarize(m.Raw).Median),
			ratio(m.Ratio.Min), ratio(m.Ratio.Median), ratio(m.Ratio.Max), goal, holds)
	}
	_ = tw.Flush()
	seen := map[string]bool{}
	for _, m := range r.Measures {
		for _, f := range m.Failed {
			if !seen[f] {
				seen[f] = true
				fmt.Fprintf(out, "\nfailed: %s\n", f)
			}
		}
	}
	for g, err := range r.Errors {
		fmt.Fprintf(out, "\ngroup %s failed: %s\n", g, err)
	}
}

// num prints a value with about three significant digits.
func num(x float64) string {
	switch a := math.Abs(x); {
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

func ratio(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }

// spawnAll runs start for first..first+n-1 at once and returns the first
// error.
func spawnAll(ctx context.Context, first, n int, start func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for i := first; i < first+n; i++ {
		g.Go(func() error { return start(gctx, i) })
	}
	return g.Wait()
}

// setClientQPS gives cfg the client-side rate limit qps: -1 none, else a
// cap with bursts of twice it.
func setClientQPS(cfg *rest.Config, qps float64) {
	cfg.QPS, cfg.Burst = float32(qps), int(2*qps)
	if qps < 0 {
		cfg.Burst = 0
	}
}
