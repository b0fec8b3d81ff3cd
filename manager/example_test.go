package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// A hub runs one Manager per process: Start recovers the cluster's
// servers and then follows them; Spawn, Stop and Watch are what its
// request handlers call. (It needs a cluster, so it is compiled, not
// run.)
func Example() {
	ctx := context.Background()
	restConfig, err := clientcmd.BuildConfigFromFlags("", clientcmd.RecommendedHomeFile)
	if err != nil {
		log.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restConfig)
	registry, err := reflector.New(reflector.Options{Config: restConfig})
	if err != nil {
		log.Fatal(err)
	}
	defer registry.Close()
	cfg, err := spawner.LoadConfig([]byte("namespace: jhub\nimage: quay.io/jupyter/base-notebook:2024-01-01\n"))
	if err != nil {
		log.Fatal(err)
	}
	m, err := manager.New(manager.Options{Client: client, Registry: registry, Config: cfg,
		LeaderElection: &manager.LeaderElection{Name: "spawnkit-hub"}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop() // a graceful shutdown: starts are detached, nothing is deleted
	go func() {
		if err := m.Start(ctx); err != nil {
			log.Fatal(err) // e.g. a Lease the hub's identity may not use
		}
	}()

	go func() {
		for st := range m.Watch(ctx) {
			fmt.Println(st.User, st.Server, st.Phase, st.Reason)
		}
	}()
	alice := naming.Server{Username: "alice", UserID: 7}
	st, started, err := m.Spawn(ctx, alice, manager.SpawnOptions{UserOptions: map[string]string{"profile": "default"}})
	if err != nil {
		log.Fatal(err) // a bad profile choice fails here, before anything is created
	}
	fmt.Println(st.Phase, started)
	events, _ := m.Events(ctx, alice)
	for e := range events {
		fmt.Println(e.Progress, e.Message)
	}
	if _, err := m.Stop(ctx, alice, spawner.StopOptions{}); err != nil {
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
