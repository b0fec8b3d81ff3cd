// Command quickstart shows spawnkit end to end: it starts a simulated
// Kubernetes cluster (or uses yours with -kubeconfig), spawns three user
// servers at once with live progress bars, polls them, fetches each one's
// URL, stops them, and prints one summary line.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -kubeconfig ~/.kube/config -namespace jhub
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// The three servers: one user name needs the safe slug scheme's hashing
// (capitals, '@', non-ASCII), one is a named server.
var servers = []naming.Server{
	{Username: "alice", UserID: 1},
	{Username: "Björn.Müller@example.com", UserID: 2},
	{Username: "carol", Servername: "gpu", UserID: 3},
}

func main() {
	// An own flag set: a dependency registers -kubeconfig on the global
	// one.
	flags := flag.NewFlagSet("quickstart", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "use this cluster instead of a simulated one")
	namespace := flags.String("namespace", "default", "namespace for the servers")
	image := flags.String("image", "quay.io/jupyter/base-notebook:2024-01-01", "single-user server image")
	_ = flags.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace, *image); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace, image string) error {
	cfg, cleanup, err := clusterConfig(ctx, kubeconfig)
	if err != nil {
		return err
	}
	defer cleanup()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return err
	}
	// Closed after the Spawners (deferred first): an event informer
	// outlives its last start by two minutes unless its Registry closes.
	defer registry.Close()

	config := kubespawner.Config{
		Namespace: namespace,
		Cmd:       []string{"jupyterhub-singleuser"},
		Pod:       manifest.PodSpec{Image: image},
	}
	spawners := make([]*spawner.Spawner, len(servers))
	for i, srv := range servers {
		if spawners[i], err = spawner.New(srv, spawner.Options{Client: client, Registry: registry, Config: config}); err != nil {
			return err
		}
		defer spawners[i].Close()
	}

	bars := mpb.NewWithContext(ctx, mpb.WithWidth(30), mpb.WithOutput(os.Stdout))
	urls := make([]string, len(servers))
	var started atomic.Int32
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range spawners {
		label := s.State().PodName
		bar := bars.AddBar(100,
			mpb.PrependDecorators(decor.Name(fmt.Sprintf("%-40s", label))),
			mpb.AppendDecorators(decor.Percentage()),
		)
		g.Go(func() error {
			// The bar follows the start's progress, registered with the
			// call itself so that no step is missed.
			url, err := s.Start(gctx, spawner.StartOptions{
				OnProgress: func(e spawner.ProgressEvent) { bar.SetCurrent(int64(e.Progress)) },
			})
			if err != nil {
				bar.Abort(false)
				return fmt.Errorf("%s: %w", label, err)
			}
			bar.SetCurrent(100)
			urls[i] = url
			started.Add(1)
			return nil
		})
	}
	startErr := g.Wait()
	bars.Wait()
	if startErr != nil {
		stopAll(spawners)
		return startErr
	}

	// A server ran when it is running and answered at its URL.
	running := 0
	for i, s := range spawners {
		status, err := s.Poll(ctx)
		if err != nil {
			return err
		}
		answer, err := fetch(ctx, urls[i])
		if err != nil {
			answer = "no answer: " + err.Error()
		}
		fmt.Printf("%-40s %-28s running=%v %s\n", s.State().PodName, urls[i], status.Running, answer)
		if status.Running && err == nil {
			running++
		}
	}
	stopped := stopAll(spawners)
	fmt.Printf("spawned %d, ran %d, stopped %d\n", started.Load(), running, stopped)
	if int(started.Load()) != len(servers) || running != len(servers) || stopped != len(servers) {
		return errors.New("not every server went through its whole lifecycle")
	}
	return nil
}

func stopAll(spawners []*spawner.Spawner) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 0
	for _, s := range spawners {
		if err := s.Stop(ctx, spawner.StopOptions{Now: true}); err != nil {
			fmt.Fprintln(os.Stderr, "quickstart: stopping", s.State().PodName+":", err)
			continue
		}
		n++
	}
	return n
}

// clusterConfig returns a client config for the given kubeconfig, or
// starts a simulated cluster (building its binaries first if needed).
func clusterConfig(ctx context.Context, kubeconfig string) (*rest.Config, func(), error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
		}
		return cfg, func() {}, nil
	}
	if os.Getenv("SPAWNKIT_TESTBIN") == "" {
		dir, err := buildTestbin(ctx)
		if err != nil {
			return nil, nil, err
		}
		os.Setenv("SPAWNKIT_TESTBIN", dir)
	}
	fmt.Println("starting a simulated cluster (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok)...")
	startCtx, cancel := context.WithTimeout(ctx, testcluster.StartTimeout)
	defer cancel()
	// Responders stand in for the servers the pods would run, so that each
	// server's URL answers.
	c, err := testcluster.Start(startCtx, testcluster.Options{Level: testcluster.Lifecycle, Responders: true})
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("cluster ready in %s\n", c.Timings.Total.Round(time.Millisecond))
	return c.Config, func() { _ = c.Stop() }, nil
}

// buildTestbin runs internal/tools/build.sh (from the repository root),
// which builds the control-plane binaries once and prints their directory.
func buildTestbin(ctx context.Context) (string, error) {
	script := filepath.Join("internal", "tools", "build.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("run the quickstart from the spawnkit repository root (no %s here), or pass -kubeconfig", script)
	}
	fmt.Println("checking the simulated cluster's binaries (built once, on first use)...")
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the control-plane binaries: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := lines[len(lines)-1]
	if dir == "" {
		return "", errors.New("build.sh printed no directory")
	}
	return dir, nil
}
