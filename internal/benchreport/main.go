// Command benchreport measures spawnkit side by side with raw client-go on
// a simulated cluster (internal/testcluster) and prints a table of ratios,
// min/median/max over repeats; it writes the same as JSON. It is a program,
// not a test: `make bench-report` runs it, `make test` never does.
//
// Measured today: spawn throughput at -n concurrent starts, spawnkit's
// spawner.Spawner.Start against raw client-go doing the minimum equivalent
// work (Pods().Create, then waiting for Ready through an informer). Both
// sides get the same client rate limit (QPS 50, burst 100), a warm
// informer for their namespace before the clock starts, and a fresh
// namespace per run, deleted and gone before the next run starts; the
// order of the two alternates between repeats. The ratio is taken per
// repeat (spawnkit/raw, above 1 means spawnkit is faster) and summarised.
//
//	go run ./internal/benchreport -n 100 -repeats 3 -json bench-report.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
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
)

const image = "quay.io/jupyter/base-notebook:2024-01-01"

func main() {
	flags := flag.NewFlagSet("benchreport", flag.ExitOnError)
	n := flags.Int("n", 100, "concurrent spawns per run")
	repeats := flags.Int("repeats", 3, "runs per side")
	jsonPath := flags.String("json", "bench-report.json", "write the report here as JSON (\"\" for none)")
	_ = flags.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n, *repeats, *jsonPath); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

// Report is what the JSON file holds.
type Report struct {
	Date     time.Time `json:"date"`
	Machine  Machine   `json:"machine"`
	Repeats  int       `json:"repeats"`
	Measures []Measure `json:"measures"`
}

// Machine says where the report was made.
type Machine struct {
	Hostname  string `json:"hostname"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
}

// Measure is one row: the value of each side per repeat, and the ratio
// spawnkit/raw per repeat summarised. For a throughput a ratio above 1
// means spawnkit is faster.
type Measure struct {
	Name     string    `json:"name"`
	Unit     string    `json:"unit"`
	Spawnkit []float64 `json:"spawnkit"`
	Raw      []float64 `json:"raw"`
	Ratio    Summary   `json:"ratio"`
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

func run(ctx context.Context, n, repeats int, jsonPath string) error {
	if n < 1 || repeats < 1 {
		return fmt.Errorf("-n and -repeats must be at least 1 (got %d and %d)", n, repeats)
	}
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
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = 50, 100 // the same for both sides
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	m := Measure{Name: fmt.Sprintf("spawn throughput, %d concurrent (Spawner.Start vs Create+informer)", n), Unit: "spawns/s"}
	var ratios []float64
	for r := range repeats {
		// Alternate which side goes first, so that neither always meets
		// the cluster warmer or busier.
		sides := []string{"raw", "spawnkit"}
		if r%2 == 1 {
			slices.Reverse(sides)
		}
		var sk, raw float64
		for _, side := range sides {
			ns, err := newNamespace(ctx, client, side)
			if err != nil {
				return err
			}
			var elapsed time.Duration
			if side == "raw" {
				elapsed, err = rawSpawns(ctx, client, ns, n)
			} else {
				elapsed, err = spawnkitSpawns(ctx, client, ns, n)
			}
			if err != nil {
				return fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
			}
			rate := float64(n) / elapsed.Seconds()
			fmt.Fprintf(os.Stderr, "repeat %d: %-8s %d spawns in %s (%.1f/s)\n", r+1, side, n, elapsed.Round(time.Millisecond), rate)
			if side == "raw" {
				raw = rate
			} else {
				sk = rate
			}
			// Leave the cluster as empty as it was, and wait for it: a
			// namespace's pods being deleted would weigh on the next run.
			if err := deleteNamespace(ctx, client, ns); err != nil {
				return err
			}
		}
		m.Spawnkit, m.Raw = append(m.Spawnkit, sk), append(m.Raw, raw)
		ratios = append(ratios, sk/raw)
	}
	m.Ratio = summarize(ratios)

	host, _ := os.Hostname()
	report := Report{
		Date:     time.Now().UTC().Truncate(time.Second),
		Machine:  Machine{Hostname: host, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()},
		Repeats:  repeats,
		Measures: []Measure{m},
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
	return nil
}

func newNamespace(ctx context.Context, client kubernetes.Interface, side string) (string, error) {
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-" + side + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a namespace: %w", err)
	}
	return ns.Name, nil
}

// deleteNamespace deletes ns and waits, up to two minutes, until it is
// gone.
func deleteNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
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
	fmt.Fprintf(out, "spawnkit vs raw client-go, %s, %s/%s, %d CPUs, %s, %d repeats\n\n",
		r.Date.Format(time.DateOnly), r.Machine.OS, r.Machine.Arch, r.Machine.CPUs, r.Machine.GoVersion, r.Repeats)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tunit\tspawnkit (median)\traw (median)\tratio min\tratio median\tratio max")
	for _, m := range r.Measures {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.2f×\t%.2f×\t%.2f×\n", m.Name, m.Unit,
			summarize(m.Spawnkit).Median, summarize(m.Raw).Median, m.Ratio.Min, m.Ratio.Median, m.Ratio.Max)
	}
	_ = tw.Flush()
}

// spawnAll runs start for 0..n-1 at once and returns how long all took.
func spawnAll(ctx context.Context, n int, start func(ctx context.Context, i int) error) (time.Duration, error) {
	g, gctx := errgroup.WithContext(ctx)
	begin := time.Now()
	for i := range n {
		g.Go(func() error { return start(gctx, i) })
	}
	err := g.Wait()
	return time.Since(begin), err
}
