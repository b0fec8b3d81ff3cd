package spawner_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// A hub with many users checks its configuration once (NewFactory),
// makes a Spawner per server, plans each start (a bad profile choice
// fails before anything exists) and hands the plan to Start, whose
// progress goes to a Stream that any number of readers can replay.
// (It needs a cluster, so it is compiled, not run.)
func ExampleFactory() {
	ctx := context.Background()
	restConfig := &rest.Config{Host: "https://127.0.0.1:6443"}
	registry, err := reflector.New(reflector.Options{Config: restConfig})
	if err != nil {
		log.Fatal(err)
	}
	defer registry.Close()
	cfg, err := kubespawner.Load([]byte("image: quay.io/jupyter/base-notebook:2024-01-01\n"))
	if err != nil {
		log.Fatal(err)
	}
	factory, err := spawner.NewFactory(spawner.Options{Client: kubernetes.NewForConfigOrDie(restConfig), Registry: registry, Config: cfg})
	if err != nil {
		log.Fatal(err) // the configuration, once for every server
	}
	s, err := factory.New(naming.Server{Username: "alice", UserID: 7})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	opts := spawner.StartOptions{UserOptions: map[string]string{"profile": "default"}}
	plan, err := s.Plan(ctx, opts)
	var perr *kubespawner.ProfileError
	if errors.As(err, &perr) {
		fmt.Println("bad choice:", perr) // nothing was created
		return
	}
	opts.Plan, opts.Progress = plan, spawner.NewStream()
	go func() {
		for e := range opts.Progress.Events(ctx, 0) {
			fmt.Println(e.Progress, e.Message)
		}
	}()
	url, err := s.Start(ctx, opts)
	fmt.Println(url, err)
}
