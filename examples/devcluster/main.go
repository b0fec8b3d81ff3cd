// Command devcluster starts spawnkit's simulated Kubernetes cluster
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok
// with fake nodes), reports it ready with a kubeconfig to point tools at,
// and keeps it running until interrupted.
//
//	make cluster            # builds the binaries once, then runs this
//	go run ./examples/devcluster -nodes 4 -once
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

func main() {
	nodes := flag.Int("nodes", 2, "number of fake nodes")
	once := flag.Bool("once", false, "exit as soon as the cluster is ready (a smoke check)")
	flag.Parse()
	if err := run(*nodes, *once); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func run(nodes int, once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, testcluster.StartTimeout)
	c, err := testcluster.Start(startCtx, testcluster.Options{
		Level:    testcluster.Lifecycle,
		Nodes:    nodes,
		Progress: os.Stderr,
		KeepLogs: !once, // a running cluster keeps its logs for you to read
	})
	cancel()
	if err != nil {
		return err
	}
	defer c.Stop()

	t := c.Timings
	fmt.Printf("cluster ready in %s (api server %s, nodes %s, first pod %s)\n",
		t.Total.Round(time.Millisecond), t.ControlPlane.Round(time.Millisecond),
		t.Nodes.Round(time.Millisecond), t.FirstPod.Round(time.Millisecond))
	if once {
		return nil // the cluster, its kubeconfig and logs go away now
	}
	fmt.Printf("api server: %s\nkubeconfig: %s\nlogs:       %s\n", c.Config.Host, c.Kubeconfig, c.LogDir)
	fmt.Println("press Ctrl-C to stop")
	<-ctx.Done()
	return nil
}
