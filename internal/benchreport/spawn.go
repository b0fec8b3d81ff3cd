package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// The spawnkit side of a spawn row: Spawner.Start or Manager.Spawn.
const (
	apiStart   = "start"
	apiManager = "manager"
)

func measureStart(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	return measureSpawns(ctx, env, repeats, apiStart)
}

func measureManager(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	return measureSpawns(ctx, env, repeats, apiManager)
}

// measureSpawns makes four rows per size: throughput, pod creates and all
// requests per spawn, and client CPU per spawn, from the same runs.
func measureSpawns(ctx context.Context, env *Env, repeats int, api string) ([]Measure, error) {
	what := map[string]string{apiStart: "Spawner.Start", apiManager: "Manager.Spawn"}[api]
	var out []Measure
	for _, n := range env.Sizes {
		through := Measure{Name: fmt.Sprintf("spawn throughput, %s, %d concurrent", what, n), Unit: "spawns/s",
			Better: Higher, Goal: &Goal{Of: "ratio", Value: 0.9}}
		creates := Measure{Name: fmt.Sprintf("pod creates per spawn, %s, %d concurrent", what, n), Unit: "POST pods/spawn",
			Better: Lower, Goal: &Goal{Of: "spawnkit", Value: 1}}
		requests := Measure{Name: fmt.Sprintf("API requests per spawn, %s, %d concurrent", what, n), Unit: "requests/spawn",
			Better: Lower}
		cpu := Measure{Name: fmt.Sprintf("client CPU per spawn, %s, %d concurrent", what, n), Unit: "CPU ms/spawn",
			Better: Lower, Goal: &Goal{Of: "ratio", Value: 1.2}}
		var traced *tracingRows
		if env.Tracing {
			traced = newTracingRows(what, n)
		}
		var calls, timings []runDetail
		for r := range spawnRepeats(n, repeats) {
			// Alternate which side goes first, so that neither always meets
			// the cluster warmer or busier.
			sides := []string{"raw", "spawnkit"}
			if r%2 == 1 {
				slices.Reverse(sides)
			}
			if traced != nil {
				// Three sides take turns at going first.
				sides = []string{"raw", "spawnkit", sideTraced}
				sides = append(sides[r%3:], sides[:r%3]...)
			}
			results := map[string]spawnResult{}
			for _, side := range sides {
				res, runErr, err := spawnRunOnce(ctx, env, api, side, n, r)
				if err != nil {
					return out, fmt.Errorf("%s, %d concurrent, repeat %d, %s: %w", what, n, r+1, side, err)
				}
				if runErr != nil {
					// A failed run is reported, not hidden: the repeat has
					// no values, and the row says why.
					msg := fmt.Sprintf("%s, %d concurrent, repeat %d, %s: %v", what, n, r+1, side, runErr)
					fmt.Fprintln(os.Stderr, msg)
					if traced != nil {
						traced.fail(msg)
					}
					if side == sideTraced {
						continue // the rows without tracing keep the repeat
					}
					for _, m := range []*Measure{&through, &creates, &requests, &cpu} {
						m.Failed = append(m.Failed, msg)
					}
					// The other side still runs: its numbers are logged
					// and kept in Detail, though the repeat has no ratio.
					continue
				}
				results[side] = res
				if side == sideTraced {
					traced.record(r, n, res)
					fmt.Fprintf(os.Stderr, "%s n=%d repeat %d: %-8s %s (%.1f/s), %.2f CPU ms/spawn (%.2f in the kernel), %.0f KB and %.0f objects allocated/spawn, %d GC cycles, %.2f spans exported/spawn, %d traces in jaeger\n",
						api, n, r+1, side, res.Elapsed.Round(time.Millisecond), float64(n)/res.Elapsed.Seconds(), msPer(res.CPU, n), res.Memory.SysCPUMsPerSpawn,
						res.Memory.AllocKBPerSpawn, res.Memory.ObjectsPerSpawn, res.Memory.GCCycles, float64(res.Spans)/float64(n), res.TracesInJaeger)
					continue // not in the rows without tracing
				}
				perVerb := perSpawn(nil, res.Calls, n)
				calls = append(calls, runDetail{Repeat: r + 1, Side: side, CallsPerSpawn: perVerb})
				timings = append(timings, runDetail{Repeat: r + 1, Side: side, Phases: &res.Phases, Memory: &res.Memory})
				fmt.Fprintf(os.Stderr, "%s n=%d repeat %d: %-8s %s (%.1f/s), %.2f requests/spawn, %.2f CPU ms/spawn, (%.2f in the kernel), %.1f+%.1f context switches/spawn, %.0f KB and %.0f objects allocated/spawn, %d GC cycles, live heap at start %.0f MB, peak stacks %.1f MB, peak heap %.0f MB, %d page faults; %s\n",
					api, n, r+1, side, res.Elapsed.Round(time.Millisecond), float64(n)/res.Elapsed.Seconds(),
					total(perVerb), msPer(res.CPU, n), res.Memory.SysCPUMsPerSpawn, res.Memory.VoluntaryPerSpawn, res.Memory.InvoluntaryPerSpawn, res.Memory.AllocKBPerSpawn, res.Memory.ObjectsPerSpawn, res.Memory.GCCycles,
					res.Memory.LiveKBAtStart/1024, res.Memory.PeakStackKB/1024, res.Memory.PeakHeapKB/1024, res.Memory.PageFaults, res.Phases)
			}
			sk, okSk := results["spawnkit"]
			raw, okRaw := results["raw"]
			if !okSk || !okRaw {
				continue
			}
			through.Add(float64(n)/sk.Elapsed.Seconds(), float64(n)/raw.Elapsed.Seconds())
			creates.Add(float64(sk.Calls["POST pods"])/float64(n), float64(raw.Calls["POST pods"])/float64(n))
			requests.Add(total(perSpawn(nil, sk.Calls, n)), total(perSpawn(nil, raw.Calls, n)))
			cpu.Add(msPer(sk.CPU, n), msPer(raw.CPU, n))
			if on, ok := results[sideTraced]; ok {
				traced.add(n, raw, sk, on)
			}
		}
		requests.Detail, through.Detail = calls, timings
		out = append(out, through, creates, requests, cpu)
		if traced != nil {
			out = append(out, traced.measures()...)
		}
	}
	return out, nil
}

// shortSpawnRun is the largest spawn count whose runs are short (about 2
// s): their CPU and throughput ratios scatter most (0.7× to 1.5× between
// repeats of the same code on 2 cores, against 1.1× to 1.3× for 1,000
// spawns), so they are repeated more.
const shortSpawnRun = 100

// spawnRepeats is how often a spawn row of n spawns is repeated:
// 3×repeats times for short runs (15 for the default 5), repeats
// otherwise. One side's CPU per spawn moves up to 2× between repeats of
// the same code (with its context switches: how the cluster's updates
// happen to batch), so the median of 9 ratios still moved by ±0.08×
// between runs of one build; the median of 15 moves about a quarter
// less.
func spawnRepeats(n, repeats int) int {
	if n <= shortSpawnRun {
		return 3 * repeats
	}
	return repeats
}

// runDetail is one side's run of a repeat, in a spawn row's Detail:
// requests per spawn by verb and resource, or phase timings.
type runDetail struct {
	Repeat        int                `json:"repeat"`
	Side          string             `json:"side"`
	CallsPerSpawn map[string]float64 `json:"calls_per_spawn,omitempty"`
	Phases        *phases            `json:"phases,omitempty"`
	Memory        *memory            `json:"memory,omitempty"`
}

func msPer(d time.Duration, n int) float64 {
	return float64(d) / float64(time.Millisecond) / float64(n)
}

// spawnRun describes one side of one spawn run, done by a child process.
type spawnRun struct {
	API        string  `json:"api"`  // apiStart or apiManager
	Side       string  `json:"side"` // "spawnkit", "raw" or sideTraced
	Namespace  string  `json:"namespace"`
	N          int     `json:"n"`
	Kubeconfig string  `json:"kubeconfig"`
	SpawnLimit int     `json:"spawn_limit,omitempty"`
	ClientQPS  float64 `json:"client_qps"`
	// KubeconfigB and BusyB are a clusters run's second cluster and how
	// many servers cycle on it (see prepareClusters).
	KubeconfigB string `json:"kubeconfig_b,omitempty"`
	BusyB       int    `json:"busy_b,omitempty"`
	Profile     string `json:"profile,omitempty"`
	MemProfile  string `json:"mem_profile,omitempty"`
	// Diagnostics (see Env): the raw side creates the pod spawnkit
	// renders, or watches pod events too; spawnkit runs without its event
	// informer.
	RawPlannedPod bool `json:"raw_planned_pod,omitempty"`
	NoEvents      bool `json:"no_events,omitempty"`
	RawEvents     bool `json:"raw_events,omitempty"`
	// Trace, on the side sideTraced, is where its spans go.
	Trace *traceSpec `json:"trace,omitempty"`
	// tp is the child's TracerProvider when Trace is set (nil: off), for
	// the prepare functions.
	tp trace.TracerProvider
}

// spawnFunc spawns servers first..first+n-1 at once, calls ready as each
// is ready, and returns when all are (or the first error). A side's
// servers are 0..N-1, measured, and N, the warm-up before the clock.
type spawnFunc func(ctx context.Context, first, n int, ready func()) error

// spawnResult is what a child measured over the spawns alone.
type spawnResult struct {
	Elapsed time.Duration  `json:"elapsed"`
	CPU     time.Duration  `json:"cpu"`
	Calls   map[string]int `json:"calls"`
	Phases  phases         `json:"phases"`
	Memory  memory         `json:"memory"`
	// Busy is what cluster B did meanwhile in a clusters run.
	Busy *busyWindow `json:"busy,omitempty"`
	// Spans are the spans a traced run exported in the window (its
	// flush included), ExportErrors its exports that failed; the parent
	// sets TracesInJaeger to the run's traces it read back from Jaeger.
	Spans          int64 `json:"spans,omitempty"`
	ExportErrors   int64 `json:"export_errors,omitempty"`
	TracesInJaeger int   `json:"traces_in_jaeger,omitempty"`
}

// memory is what the Go runtime did over a spawn run: a side that
// allocates more pays for it in GC cycles, which its CPU includes.
type memory struct {
	GCCycles        uint32  `json:"gc_cycles"`
	AllocKBPerSpawn float64 `json:"alloc_kb_per_spawn"`
	ObjectsPerSpawn float64 `json:"objects_per_spawn"`
	GoroutinesAtEnd int     `json:"goroutines_at_end"`
	// LiveKBAtStart is the heap in use when the clock started (just
	// after a GC: the side's live data); PeakStackKB and PeakHeapKB the
	// most goroutine stacks and heap objects in use, sampled every 100 ms.
	// GC marking costs grow with both.
	LiveKBAtStart float64 `json:"live_kb_at_start"`
	PeakStackKB   float64 `json:"peak_stack_kb"`
	PeakHeapKB    float64 `json:"peak_heap_kb"`
	// PageFaults are the minor page faults over the run.
	PageFaults int64 `json:"page_faults"`
	// SysCPUMsPerSpawn is the kernel's part of the CPU per spawn;
	// Switches the threads' voluntary and involuntary context switches
	// per spawn.
	SysCPUMsPerSpawn    float64 `json:"sys_cpu_ms_per_spawn"`
	VoluntaryPerSpawn   float64 `json:"voluntary_switches_per_spawn"`
	InvoluntaryPerSpawn float64 `json:"involuntary_switches_per_spawn"`
}

// phases say when, from the start of the clock, the pod creates were
// answered and the spawns were done (ready), at the median and the last:
// a side slower at the creates loses in the client or the API server, a
// side slower only from create to ready loses in how it learns of
// readiness.
type phases struct {
	CreatedP50 time.Duration `json:"created_p50"`
	CreatedMax time.Duration `json:"created_max"`
	ReadyP50   time.Duration `json:"ready_p50"`
	ReadyMax   time.Duration `json:"ready_max"`
	// ServerReady is when the pods' Ready condition turned true by the
	// cluster's clock (whole seconds): the same as Ready for both sides
	// means the cluster was as fast for both, and a later Ready means the
	// side learnt of it later.
	ServerReadyP50 time.Duration `json:"server_ready_p50"`
	ServerReadyMax time.Duration `json:"server_ready_max"`
}

func (p phases) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("created p50 %s max %s, ready p50 %s max %s, ready by the cluster's clock p50 %s max %s",
		r(p.CreatedP50), r(p.CreatedMax), r(p.ReadyP50), r(p.ReadyMax), r(p.ServerReadyP50), r(p.ServerReadyMax))
}

// p50max returns the median and the largest of ds.
func p50max(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2], s[len(s)-1]
}

// spawnRunOnce runs one side in a fresh namespace, in a child process,
// and deletes the namespace again, waiting until it is gone. runErr is
// the run's failure; err a failure to set up or clean up, after which no
// further run would be fair.
func spawnRunOnce(ctx context.Context, env *Env, api, side string, n, repeat int) (res spawnResult, runErr, err error) {
	ns, err := env.NewNamespace(ctx, side)
	if err != nil {
		return spawnResult{}, nil, err
	}
	spec := spawnRun{API: api, Side: side, Namespace: ns, N: n, Kubeconfig: env.Cluster.Kubeconfig, SpawnLimit: env.SpawnLimit, ClientQPS: env.ClientQPS,
		RawPlannedPod: env.RawPlannedPod, NoEvents: env.NoEvents, RawEvents: env.RawEvents}
	if api == apiManager && !env.NoEvents {
		// The Manager reports every start's progress, pod events
		// included: the equivalent raw work watches them too.
		spec.RawEvents = true
	}
	if env.CPUProfile != "" {
		spec.Profile = fmt.Sprintf("%s-%s-%d-%s-r%d.pprof", env.CPUProfile, api, n, side, repeat+1)
	}
	if env.MemProfile != "" {
		spec.MemProfile = fmt.Sprintf("%s-%s-%d-%s-r%d", env.MemProfile, api, n, side, repeat+1)
	}
	if side == sideTraced {
		spec.Trace = &traceSpec{Endpoint: env.Jaeger.OTLPGRPCEndpoint(), Service: traceService(api, n, repeat)}
	}
	res, runErr = runInChild(ctx, env.Self, spec)
	if ctx.Err() != nil {
		return res, nil, context.Cause(ctx)
	}
	if runErr == nil && spec.Trace != nil {
		// A cheap "on" whose spans never arrived would mean nothing.
		res.TracesInJaeger, runErr = verifyTraces(ctx, env.Jaeger, spec.Trace.Service, rootSpan(api), n+1)
	}
	// A 1,000-pod namespace takes kwok a while to empty.
	if err = env.DeleteNamespace(ctx, ns, 2*time.Minute+time.Duration(n)*300*time.Millisecond); err != nil {
		return res, runErr, err
	}
	// The namespace is gone, but the cluster's components may still be
	// digesting its deletion (kwok, the garbage collector, etcd
	// compaction): pause, then wait until the machine is quiet too, so
	// that the next run meets the cluster as this one did.
	select {
	case <-time.After(settle(n)):
	case <-ctx.Done():
		return res, runErr, context.Cause(ctx)
	}
	next := fmt.Sprintf("the run after %s n=%d repeat %d %s", api, n, repeat+1, side)
	if err := awaitQuiet(ctx, next, quietBetweenRuns); err != nil {
		return res, runErr, err
	}
	return res, runErr, nil
}

// warmUpPods are the names the warm-up server's pod has on either side
// (server n): it was ready before the clock.
func warmUpPods(n int) map[string]bool {
	return map[string]bool{rawName(n): true, "jupyter-" + serverOf(n).Username: true}
}

// settle is the pause after a run of n spawns and its namespace's
// deletion.
func settle(n int) time.Duration { return 2*time.Second + time.Duration(n)*10*time.Millisecond }

func runInChild(ctx context.Context, self string, spec spawnRun) (spawnResult, error) {
	arg, err := json.Marshal(spec)
	if err != nil {
		return spawnResult{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-child", string(arg))
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	out, err := cmd.Output()
	if err != nil {
		// The child's own words are its last line.
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		return spawnResult{}, fmt.Errorf("the child process: %w: %s", err, lines[len(lines)-1])
	}
	var res spawnResult
	if err := json.Unmarshal(out, &res); err != nil {
		return spawnResult{}, fmt.Errorf("reading the child's result %q: %w", out, err)
	}
	return res, nil
}

// runChild does one side of a spawn run: it connects with the spawn rows'
// rate limit and a counting transport, prepares the side (informers
// synced), and measures its spawns alone: wall clock, the process's CPU
// time, and requests. It writes the result to out as JSON.
func runChild(ctx context.Context, arg string, out io.Writer) error {
	var spec spawnRun
	if err := json.Unmarshal([]byte(arg), &spec); err != nil {
		return fmt.Errorf("reading -child: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", spec.Kubeconfig)
	if err != nil {
		return err
	}
	setClientQPS(cfg, spec.ClientQPS) // the same for both sides
	counter := newCallCounter()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counter.wrap(rt) })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var exported *countingExporter
	if spec.Trace != nil {
		var tp *sdktrace.TracerProvider
		if tp, exported, err = newTracing(ctx, *spec.Trace); err != nil {
			return err
		}
		spec.tp = tp
		defer func() {
			// Flushes what the window left (the spawns are all done):
			// the parent reads the traces back once this process is gone.
			if err := tp.Shutdown(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintln(os.Stderr, "benchreport: shutting the tracer provider down:", err)
			}
		}()
	}
	var prepare func(ctx context.Context, client kubernetes.Interface, spec spawnRun) (spawns spawnFunc, done func(), err error)
	switch {
	case spec.Side == "raw":
		prepare = prepareRaw
	case spec.API == apiStart:
		prepare = prepareStart
	case spec.API == apiManager:
		prepare = prepareManager
	case spec.API == apiClusters:
		prepare = prepareClusters
	default:
		return fmt.Errorf("no side %q of %q", spec.Side, spec.API)
	}
	// Generous, but a start that hangs must not hang the report.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(spec.N)*100*time.Millisecond)
	defer cancel()
	spawns, done, err := prepare(ctx, client, spec)
	if err != nil {
		return err
	}
	defer done()
	// One spawn before the clock, of a server of its own (index N): a
	// running hub has spawned before, so the code it runs, its
	// connection and the runtime's heap are warm. Without it, the
	// 100-spawn rows counted the side's first use of its code (page
	// faults and cold caches, more for the side with more code) in their
	// CPU per spawn.
	if err := spawns(ctx, spec.N, 1, func() {}); err != nil {
		return fmt.Errorf("the warm-up spawn: %w", err)
	}
	flush := func() error { return nil }
	if tp, ok := spec.tp.(*sdktrace.TracerProvider); ok {
		// The exports of the spans the window makes are part of its cost
		// (a hub's batch processor makes them sooner or later): the window
		// ends with a flush, and the warm-up's spans leave before it.
		flush = func() error { return tp.ForceFlush(ctx) }
		if err := flush(); err != nil {
			return fmt.Errorf("flushing the warm-up's spans: %w", err)
		}
	}
	// The setup's garbage is collected, and its memory returned to the
	// OS, before the clock: otherwise the runtime's background scavenger
	// returns it during the spawns (madvise calls, up to a tenth of a
	// side's CPU) and the side with the larger setup pays for it.
	debug.FreeOSMemory()

	stopProfile, err := startProfile(spec.Profile)
	if err != nil {
		return err
	}
	if err := writeHeapProfile(spec.MemProfile, "before"); err != nil {
		return err
	}
	calls0 := counter.snapshot()
	var spans0 int64
	if exported != nil {
		spans0 = exported.spans.Load()
	}
	var mem0, mem1 goruntime.MemStats
	goruntime.ReadMemStats(&mem0)
	faults0, use0 := pageFaults(), rusage()
	cpu0, err := cpuTime()
	if err != nil {
		return err
	}
	var mu sync.Mutex // guards readyAt
	var readyAt []time.Duration
	peaks, stopPeaks := samplePeaks()
	begin := time.Now()
	spawnErr := spawns(ctx, 0, spec.N, func() {
		d := time.Since(begin)
		mu.Lock()
		readyAt = append(readyAt, d)
		half := len(readyAt) == spec.N/2
		mu.Unlock()
		if half && spec.MemProfile != "" {
			// What is live while half the starts still wait.
			goruntime.GC()
			if err := writeHeapProfile(spec.MemProfile, "half"); err != nil {
				fmt.Fprintln(os.Stderr, "benchreport:", err)
			}
		}
	})
	elapsed := time.Since(begin)
	flushErr := flush()
	stopPeaks()
	cpu1, err := cpuTime()
	faults, use1 := pageFaults()-faults0, rusage()
	if err != nil {
		return err
	}
	goroutines := goruntime.NumGoroutine()
	goruntime.ReadMemStats(&mem1)
	calls1 := counter.snapshot()
	if err := stopProfile(); err != nil {
		return err
	}
	if err := writeHeapProfile(spec.MemProfile, "after"); err != nil {
		return err
	}
	if spawnErr != nil {
		return spawnErr
	}
	if flushErr != nil {
		return fmt.Errorf("flushing the window's spans: %w", flushErr)
	}
	res := spawnResult{Elapsed: elapsed, CPU: cpu1 - cpu0, Calls: map[string]int{}, Memory: memory{
		GCCycles:            mem1.NumGC - mem0.NumGC,
		AllocKBPerSpawn:     float64(mem1.TotalAlloc-mem0.TotalAlloc) / 1024 / float64(spec.N),
		ObjectsPerSpawn:     float64(mem1.Mallocs-mem0.Mallocs) / float64(spec.N),
		GoroutinesAtEnd:     goroutines,
		LiveKBAtStart:       float64(mem0.HeapAlloc) / 1024,
		PeakStackKB:         float64(peaks.stack.Load()) / 1024,
		PeakHeapKB:          float64(peaks.heap.Load()) / 1024,
		PageFaults:          faults,
		SysCPUMsPerSpawn:    msPer(use1.SysCPU-use0.SysCPU, spec.N),
		VoluntaryPerSpawn:   float64(use1.Voluntary-use0.Voluntary) / float64(spec.N),
		InvoluntaryPerSpawn: float64(use1.Involuntary-use0.Involuntary) / float64(spec.N),
	}}
	res.Busy = busyInWindow
	if exported != nil {
		res.Spans, res.ExportErrors = exported.spans.Load()-spans0, exported.failed.Load()
		if res.Spans == 0 {
			return errNoSpans
		}
	}
	res.Phases.CreatedP50, res.Phases.CreatedMax = p50max(counter.createdSince(begin))
	mu.Lock()
	res.Phases.ReadyP50, res.Phases.ReadyMax = p50max(readyAt)
	mu.Unlock()
	if res.Phases.ServerReadyP50, res.Phases.ServerReadyMax, err = serverReady(ctx, client, spec.Namespace, begin, warmUpPods(spec.N)); err != nil {
		return err
	}
	for k, v := range calls1 {
		if d := v - calls0[k]; d != 0 {
			res.Calls[k] = d
		}
	}
	return json.NewEncoder(out).Encode(res)
}

// peaks are the most stack and heap object bytes seen in use.
type peaks struct{ stack, heap atomic.Uint64 }

// samplePeaks samples runtime/metrics every 100 ms (reading them stops
// no world) until stop, which waits for the sampler to end.
func samplePeaks() (*peaks, func()) {
	p := &peaks{}
	samples := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(samples)
		if v := samples[0].Value.Uint64(); v > p.stack.Load() {
			p.stack.Store(v)
		}
		if v := samples[1].Value.Uint64(); v > p.heap.Load() {
			p.heap.Store(v)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	})
	return p, func() { close(done); wg.Wait(); read() }
}

// serverReady returns when, after begin, the namespace's pods turned
// Ready by their Ready condition's transition time: the median and the
// last.
func serverReady(ctx context.Context, client kubernetes.Interface, ns string, begin time.Time, warmUp map[string]bool) (time.Duration, time.Duration, error) {
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("listing the pods: %w", err)
	}
	var at []time.Duration
	for _, pod := range list.Items {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && !warmUp[pod.Name] {
				at = append(at, c.LastTransitionTime.Sub(begin))
			}
		}
	}
	p50, last := p50max(at)
	return p50, last, nil
}

// prepareRaw is the minimum client-go does for the same result as a
// start: create a pod and wait until it is Ready, seen through an informer
// on the namespace that was synced before the clock started.
func prepareRaw(ctx context.Context, client kubernetes.Interface, spec spawnRun) (spawnFunc, func(), error) {
	ns, n := spec.Namespace, spec.N+1          // and the warm-up's
	ready := make(map[string]chan struct{}, n) // read-only once the informer runs
	for i := range n {
		ready[rawName(i)] = make(chan struct{})
	}
	closed := map[string]bool{} // only the handler goroutine touches it
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || closed[pod.Name] || !podReady(pod) {
			return
		}
		if ch, ok := ready[pod.Name]; ok {
			closed[pod.Name] = true
			close(ch)
		}
	}
	inf := rawPodInformer(client, ns)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return nil, nil, err
	}
	synced := []cache.InformerSynced{inf.HasSynced}
	infCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(infCtx) })
	if spec.RawEvents {
		// The same watches as spawnkit's: its pod events too.
		events := client.CoreV1().Events(ns)
		sel := fields.OneTermEqualSelector("involvedObject.kind", "Pod").String()
		evs := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return events.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return events.Watch(ctx, o)
			},
		}, &corev1.Event{}, 0, cache.Indexers{})
		wg.Go(func() { evs.RunWithContext(infCtx) })
		synced = append(synced, evs.HasSynced)
	}
	done := func() { cancel(); wg.Wait() }
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		done()
		return nil, nil, fmt.Errorf("the raw informer did not sync: %w", ctx.Err())
	}
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: rawName(i), Labels: map[string]string{"component": "singleuser-server"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "notebook", Image: image, Command: []string{"jupyterhub-singleuser"},
				Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888}},
			}}},
		}
		if spec.RawPlannedPod {
			o, err := spawner.Plan(ctx, serverOf(i), spawnConfig(ns), spawner.StartOptions{})
			if err != nil {
				return nil, nil, err
			}
			pods[i] = o.Pod
			pods[i].Name = rawName(i)
		}
	}
	return func(ctx context.Context, first, n int, readyFn func()) error {
		return spawnAll(ctx, first, n, func(ctx context.Context, i int) error {
			// The least a hub does to have a pod of its own for a
			// spawn: a copy of its template (here the user's rendering,
			// made before the clock, so both sides send the same bytes).
			pod := pods[i].DeepCopy()
			if err := rawCreate(ctx, client, ns, pod); err != nil {
				return fmt.Errorf("creating pod %s: %w", pod.Name, err)
			}
			// A created pod is garbage, as a hub's would be (spawnkit's
			// rendering is too): keeping all of them referenced would
			// hold the raw side's heap at its peak through the run and
			// spare it the runtime's work of returning memory as the
			// heap shrinks, which spawnkit's side pays. The templates
			// go as they are used, too.
			pods[i] = nil
			select {
			case <-ready[pod.Name]:
				readyFn()
				return nil
			case <-ctx.Done():
				return fmt.Errorf("waiting for pod %s to be ready: %w", pod.Name, ctx.Err())
			}
		})
	}, done, nil
}

// rawBackoff retries a raw create for about 20 seconds.
var rawBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 9, Cap: 5 * time.Second}

// rawCreate is a create with the least retrying a hub needs: an
// overloaded API server answers with timeouts and 5xx, or resets the
// stream, and spawnkit retries those too. A retry that finds the pod
// already there means an earlier try landed.
func rawCreate(ctx context.Context, client kubernetes.Interface, ns string, pod *corev1.Pod) error {
	tries := 0
	return retry.OnError(rawBackoff, func(err error) bool {
		var uerr *url.Error
		return ctx.Err() == nil && (apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
			apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || errors.As(err, &uerr))
	}, func() error {
		tries++
		_, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if tries > 1 && apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// rawPodInformer is client-go's plain pod informer for ns, listing and
// watching through the typed client as informer factories do (so with
// the same wire encoding as spawnkit's Registry).
func rawPodInformer(client kubernetes.Interface, ns string) cache.SharedIndexInformer {
	pods := client.CoreV1().Pods(ns)
	return cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

func rawName(i int) string { return fmt.Sprintf("raw-%04d", i) }

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// spawnConfig is the configuration both spawnkit sides start servers
// with: the image and command of the raw side's pod, everything else
// KubeSpawner's defaults.
func spawnConfig(ns string) kubespawner.Config {
	return kubespawner.Config{Namespace: ns, Cmd: []string{"jupyterhub-singleuser"}, Pod: manifest.PodSpec{Image: image}}
}

func serverOf(i int) naming.Server {
	return naming.Server{Username: fmt.Sprintf("user%04d", i), UserID: int64(i + 1)}
}

// warmRegistry makes a Registry and holds its pod (and event) informers
// for ns, synced, as a running hub's would be; release lets them go.
func warmRegistry(ctx context.Context, client kubernetes.Interface, ns string, withEvents bool) (*reflector.Registry, func(), error) {
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return nil, nil, err
	}
	pods, err := registry.Pods(ctx, ns)
	if err != nil {
		registry.Close()
		return nil, nil, err
	}
	release := func() { pods.Release(); registry.Close() }
	if err := pods.WaitForSync(ctx); err != nil {
		release()
		return nil, nil, err
	}
	if !withEvents {
		return registry, release, nil
	}
	events, err := registry.Events(ctx, ns)
	if err != nil {
		release()
		return nil, nil, err
	}
	release = func() { events.Release(); pods.Release(); registry.Close() }
	if err := events.WaitForSync(ctx); err != nil {
		release()
		return nil, nil, err
	}
	return registry, release, nil
}

// startFailed is the error of a failed start. It is never inlined, so
// that the measured goroutine's frame is as lean as the raw side's: a
// start's goroutine keeps the stack its deepest call needed.
//
//go:noinline
func startFailed(sp *spawner.Spawner, err error) error {
	return fmt.Errorf("starting %s: %w", sp.State().PodName, err)
}

// prepareStart makes n Spawners sharing one warm Registry; the spawns
// call Start on each at once, without OnProgress, so no event informer is
// warmed: such starts never use one (a hub that reports progress pays for
// it in the manager rows, where raw watches events too).
func prepareStart(ctx context.Context, client kubernetes.Interface, spec spawnRun) (spawnFunc, func(), error) {
	registry, release, err := warmRegistry(ctx, client, spec.Namespace, false)
	if err != nil {
		return nil, nil, err
	}
	config := spawnConfig(spec.Namespace)
	config.EventsEnabled = new(!spec.NoEvents)
	spawners := make([]*spawner.Spawner, spec.N+1) // and the warm-up's
	done := func() {
		for _, sp := range spawners {
			if sp != nil {
				sp.Close()
			}
		}
		release()
	}
	for i := range spawners {
		if spawners[i], err = spawner.New(serverOf(i), spawner.Options{Client: client, Registry: registry, Config: config,
			TracerProvider: spec.tp}); err != nil {
			done()
			return nil, nil, err
		}
	}
	return func(ctx context.Context, first, n int, ready func()) error {
		return spawnAll(ctx, first, n, func(ctx context.Context, i int) error {
			if _, err := spawners[i].Start(ctx, spawner.StartOptions{}); err != nil {
				return startFailed(spawners[i], err)
			}
			ready()
			return nil
		})
	}, done, nil
}
