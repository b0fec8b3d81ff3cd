package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// A hub runs one Manager per process: Start recovers the cluster's
// servers and then follows them (its error, a Lease the hub's identity
// may not use included, ends the hub); WaitLeading holds the hub's
// requests back until this replica holds the Lease; Spawn, Stop and
// Watch are what its request handlers call. README.md's Manager program
// is this one, run against a simulated cluster by internal/snippets.
// (It needs a cluster, so it is compiled, not run.)
func Example() {
	restConfig, err := clientcmd.BuildConfigFromFlags("", clientcmd.RecommendedHomeFile)
	if err != nil {
		log.Fatal(err)
	}
	// client-go's default limit (QPS 5, burst 10) would hold the hub to
	// about two starts a second; the API server's own fairness protects it.
	restConfig.QPS, restConfig.Burst = 50, 100
	client := kubernetes.NewForConfigOrDie(restConfig)
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		log.Fatal(err)
	}
	defer registry.Close()
	cfg, err := kubespawner.Load([]byte("namespace: jhub\nimage: quay.io/jupyter/base-notebook:2024-01-01\n"))
	if err != nil {
		log.Fatal(err)
	}
	m, err := manager.New(manager.Options{Client: client, Registry: registry, Config: cfg,
		LeaderElection: &manager.LeaderElection{Name: "spawnkit-hub"}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.Start(ctx) }) // until ctx ends: a graceful shutdown deletes nothing
	g.Go(func() error {
		defer stop() // the hub is done: shut the Manager down
		if err := m.WaitLeading(ctx); err != nil {
			return err // ctx ended, or Start failed (the error then wraps Start's)
		}
		go func() {
			for st := range m.Watch(ctx) {
				fmt.Println(st.User, st.Server, st.Phase, st.Reason)
			}
		}()
		alice := naming.Server{Username: "alice", UserID: 7}
		st, started, err := m.Spawn(ctx, alice, manager.SpawnOptions{UserOptions: map[string]string{"profile": "default"}})
		if err != nil {
			return err // a bad profile choice fails here, before anything is created
		}
		fmt.Println(st.Phase, started)
		events, err := m.Events(ctx, alice)
		if err != nil {
			return err
		}
		for e := range events {
			fmt.Println(e.Progress, e.Message)
		}
		_, err = m.Stop(ctx, alice, spawner.StopOptions{})
		return err
	})
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
}

// A hub that saved a server's State (its database) gives it back when
// the Manager may not know the server: after either restarted under a
// changed configuration. The server is then found where the State says,
// in a namespace the configuration still trusts (retired_namespaces
// keeps an old one trusted). (It needs a running Manager, so it is
// compiled, not run.)
func ExampleManager_Seed() {
	var m *manager.Manager // started as in Example
	ctx := context.Background()
	saved := `{"pod_name":"jupyter-alice","namespace":"jhub-old","pvc_name":"claim-alice"}` // from the hub's database
	var st spawner.State
	if err := json.Unmarshal([]byte(saved), &st); err != nil {
		log.Fatal(err)
	}
	status, err := m.Seed(ctx, manager.Seed{Server: naming.Server{Username: "alice"}, State: st})
	switch {
	case errors.Is(err, manager.ErrStateRefused):
		log.Print(err) // names the option to set, e.g. retired_namespaces
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(status.Phase, status.URL)
	}
}
