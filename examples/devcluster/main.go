// Command devcluster starts spawnkit's simulated Kubernetes cluster
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok
// with fake nodes), reports it ready with a kubeconfig to point tools at,
// and keeps it running until interrupted. Pods get loopback IPs and, unless
// -responders=false, answer HTTP on their container ports.
//
//	make cluster            # builds the binaries once, then runs this
//	go run ./examples/devcluster -nodes 4 -once
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// config is what the command line chooses.
type config struct {
	nodes      int
	once       bool
	responders bool
	workloads  bool
	podCIDR    string
}

// parseFlags parses args on a flag set of its own: the global one also
// holds flags that dependencies register at init (controller-runtime's
// -kubeconfig), which this command would list under -h and then ignore.
func parseFlags(args []string, output io.Writer) (config, error) {
	var cfg config
	flags := flag.NewFlagSet("devcluster", flag.ContinueOnError)
	flags.SetOutput(output)
	flags.IntVar(&cfg.nodes, "nodes", 2, "number of fake nodes")
	flags.BoolVar(&cfg.once, "once", false, "exit as soon as the cluster is ready (a smoke check)")
	flags.BoolVar(&cfg.responders, "responders", true, "answer HTTP on every running pod's IP and container ports")
	flags.BoolVar(&cfg.workloads, "workloads", true, "run the Deployment, ReplicaSet, StatefulSet and Job controllers (their pods are kwok's: no container runs)")
	flags.StringVar(&cfg.podCIDR, "pod-cidr", "", "range in 127.0.0.0/8 for pod IPs (default: a free 127.X.0.0/16)")
	err := flags.Parse(args)
	if err == nil && flags.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", flags.Args())
		fmt.Fprintln(output, err)
		flags.Usage()
	}
	return cfg, err
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, testcluster.StartTimeout)
	c, err := testcluster.Start(startCtx, testcluster.Options{
		Level:      testcluster.Lifecycle,
		Nodes:      cfg.nodes,
		PodCIDR:    cfg.podCIDR,
		Responders: cfg.responders,
		Workloads:  cfg.workloads,
		Progress:   os.Stderr,
		KeepLogs:   !cfg.once, // a running cluster keeps its logs for you to read
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
	if cfg.once {
		return nil // the cluster, its kubeconfig and logs go away now
	}
	fmt.Printf("api server: %s\nkubeconfig: %s\nlogs:       %s\npod cidr:   %s\n", c.Config.Host, c.Kubeconfig, c.LogDir, c.PodCIDR)
	if cfg.responders {
		fmt.Println("responders: running pods answer HTTP on podIP:containerPort")
	}
	fmt.Println("press Ctrl-C to stop")
	<-ctx.Done()
	return nil
}
