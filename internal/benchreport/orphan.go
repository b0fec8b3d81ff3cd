package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/orphan"
	"github.com/spawnkit/spawnkit/reflector"
)

// orphanObjects is how many server pods, and known servers, the orphan
// rows diff; -quick uses a tenth.
const (
	orphanObjects   = 100_000
	orphanNamespace = "jhub"
	// orphanCalls is how many calls each repeat times per side; the
	// fastest counts (what the code costs, without the interference of
	// whatever else the machine runs).
	orphanCalls = 3
)

// measureOrphanDiff measures the orphan diff of a large hub: n server pods
// in a synced pod cache against n servers the hub knows, once with 1% of
// them stopped (their pods are the orphans) and once with every server
// stopped (every pod an orphan: the worst case). spawnkit's side is
// orphan.List serving the pods from the Registry's synced informer (no
// LIST): reading the cache, attributing each pod by its annotations,
// judging it and sorting the orphans. Raw is the naive diff over a plain
// informer's store: a map lookup per pod and a sort. The rows measure the
// diff, not the API server, so the pods come from client-go's fake
// clientset (an in-memory tracker behind the same typed client and
// informers): 100,000 pods on the simulated cluster would take minutes to
// create and delete and measure nothing more. Each call is timed after a
// GC, after a warm-up call, and the fastest of orphanCalls counts;
// the order alternates between repeats.
func measureOrphanDiff(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	// The rows before may have deleted 10,000 pods and 1,000-pod
	// namespaces: the simulated cluster digests that for a while
	// (garbage collection, compaction, kwok's clean-up) on the same two
	// cores. One full run measured the all-orphans diff at 90 ms right
	// after them and 66 ms alone. The diff is CPU-bound in one process,
	// so it waits until the machine is quiet.
	if err := awaitQuiet(ctx, "the orphan rows", quietForTiming); err != nil {
		return nil, err
	}
	// The diff runs in a child process, with a heap of its own: this
	// process has been through the other rows (10,000-pod caches built
	// and dropped), and one full run measured the all-stopped diff
	// growing from 67 to 114 ms over its repeats (raw's too) where a run
	// of the orphan rows alone measured 52-57 ms. The rows measure the
	// diff, not the benchmark's history.
	args := []string{"-orphan-child", "-repeats", strconv.Itoa(repeats)}
	if env.Quick {
		args = append(args, "-quick")
	}
	cmd := exec.CommandContext(ctx, env.Self, args...)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	out, err := cmd.Output()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		return nil, fmt.Errorf("the orphan child process: %w: %s", err, lines[len(lines)-1])
	}
	var ms []Measure
	if err := json.Unmarshal(out, &ms); err != nil {
		return nil, fmt.Errorf("reading the orphan child's result: %w", err)
	}
	return ms, nil
}

// runOrphanChild measures the orphan rows in this process and writes them
// to out as JSON.
func runOrphanChild(ctx context.Context, repeats int, quick bool, out io.Writer) error {
	ms, err := orphanRows(ctx, quick, repeats)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(ms)
}

func orphanRows(ctx context.Context, quick bool, repeats int) ([]Measure, error) {
	n := orphanObjects
	if quick {
		n /= 10
	}
	begin := time.Now()
	objs := make([]kruntime.Object, n)
	for i := range objs {
		objs[i] = orphanPod(i)
	}
	client := testcluster.FakeClientset(objs...)
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return nil, err
	}
	defer registry.Close()
	pods, err := registry.Pods(ctx, orphanNamespace)
	if err != nil {
		return nil, err
	}
	defer pods.Release()
	if err := pods.WaitForSync(ctx); err != nil {
		return nil, err
	}
	inf := coreinformers.NewPodInformer(client, orphanNamespace, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	stop, err := startInformer(ctx, inf, "pod")
	if err != nil {
		return nil, err
	}
	defer stop()
	fmt.Fprintf(os.Stderr, "%d pods cached on both sides in %s\n", n, time.Since(begin).Round(time.Millisecond))

	cases := []struct {
		name    string
		stopped func(i int) bool
		orphans int
		goal    float64
	}{
		{"1% of servers stopped", func(i int) bool { return i%100 == 0 }, (n + 99) / 100, 50},
		{"all servers stopped (every pod an orphan)", func(int) bool { return true }, n, 80},
	}
	var out []Measure
	for _, c := range cases {
		known := orphan.NewKnown(n)
		rawKnown := make(map[orphan.ServerKey]bool, n)
		for i := range n {
			user := orphanUser(i)
			known.Add(user, "", !c.stopped(i))
			rawKnown[orphan.ServerKey{User: user}] = !c.stopped(i)
		}
		spawnkit := func() (int, error) {
			got, err := orphan.List(ctx, known, orphan.Options{Client: client, Registry: registry,
				Namespaces: []string{orphanNamespace}, Kinds: []orphan.Kind{orphan.KindPod}})
			return len(got), err
		}
		raw := func() (int, error) { return len(naiveOrphans(inf.GetStore().List(), rawKnown)), nil }
		m := Measure{
			Name: fmt.Sprintf("orphan diff, %s pods × %s known, %s (orphan.List on the cache vs map diff)", count(n), count(n), c.name),
			Unit: "ms", Better: Lower, Goal: &Goal{Of: "spawnkit", Value: c.goal},
		}
		for _, f := range []func() (int, error){spawnkit, raw} { // warm-up
			if _, err := f(); err != nil {
				return nil, err
			}
		}
		for r := range repeats {
			var sk, rw float64
			for _, side := range sidesInOrder(r) {
				f := raw
				if side == "spawnkit" {
					f = spawnkit
				}
				best, err := bestOf(orphanCalls, c.orphans, f)
				if err != nil {
					return nil, fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
				}
				if side == "spawnkit" {
					sk = best
				} else {
					rw = best
				}
			}
			fmt.Fprintf(os.Stderr, "repeat %d: orphan diff, %s: spawnkit %.1f ms, raw %.1f ms\n", r+1, c.name, sk, rw)
			m.Add(sk, rw)
		}
		out = append(out, m)
	}
	return out, nil
}

// bestOf calls f n times, each after a GC, checks that it found want
// orphans, and returns the fastest call in milliseconds.
func bestOf(n, want int, f func() (int, error)) (float64, error) {
	best := time.Duration(math.MaxInt64)
	for range n {
		runtime.GC()
		begin := time.Now()
		got, err := f()
		elapsed := time.Since(begin)
		if err != nil {
			return 0, err
		}
		if got != want {
			return 0, fmt.Errorf("%d orphans, want %d", got, want)
		}
		best = min(best, elapsed)
	}
	return ms(best), nil
}

func orphanUser(i int) string { return fmt.Sprintf("user%06d", i) }

// orphanPod is server i's pod as spawnkit labels and annotates it.
func orphanPod(i int) *corev1.Pod {
	user := orphanUser(i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "jupyter-" + user, Namespace: orphanNamespace, UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(1000 + i), CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)),
			Labels:      map[string]string{naming.LabelComponent: "singleuser-server", naming.LabelManagedBy: naming.ManagedBySpawnkit},
			Annotations: map[string]string{naming.AnnotationUsername: user, naming.AnnotationServername: ""},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: manifest.ContainerName, Image: image}}},
	}
}

// rawOrphan is what the naive diff reports of an orphan pod.
type rawOrphan struct {
	namespace, name string
	uid             types.UID
	server          orphan.ServerKey
}

// naiveOrphans is the diff a hub writes by hand: every pod that names a
// server the hub does not know, or knows as stopped, sorted by namespace
// and name.
func naiveOrphans(objs []any, known map[orphan.ServerKey]bool) []rawOrphan {
	var out []rawOrphan
	for _, obj := range objs {
		pod := obj.(*corev1.Pod)
		user, ok := pod.Annotations[naming.AnnotationUsername]
		if !ok || pod.DeletionTimestamp != nil {
			continue
		}
		key := orphan.ServerKey{User: user, Server: pod.Annotations[naming.AnnotationServername]}
		if !known[key] {
			out = append(out, rawOrphan{namespace: pod.Namespace, name: pod.Name, uid: pod.UID, server: key})
		}
	}
	slices.SortFunc(out, func(a, b rawOrphan) int {
		if c := strings.Compare(a.namespace, b.namespace); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}
