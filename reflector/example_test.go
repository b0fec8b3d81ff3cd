package reflector_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/reflector"
)

// This example needs a cluster, so it is compiled but not run. A hub makes
// one Registry and shares it: here the pod informer of a namespace, its
// first list awaited, and one pod read from the cache, with no API call.
func ExampleNew() {
	// The cluster of the kubeconfig file $KUBECONFIG names or, with it
	// unset inside a cluster, the pod's service account. QPS and Burst
	// left at zero get no client-side rate limit (see Options.Config).
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		log.Fatal(err)
	}
	registry, err := reflector.New(reflector.Options{Config: cfg})
	if err != nil {
		log.Fatal(err)
	}
	defer registry.Close() // stops every informer and waits for them

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The first holder starts the namespace's pod informer; later holders
	// (every Spawner of the namespace, orphan.List) share it.
	pods, err := registry.Pods(ctx, "jhub")
	if err != nil {
		log.Fatal(err)
	}
	defer pods.Release()

	// Every read waits for the first list itself; WaitForSync lets a hub
	// report readiness only once its cache is complete.
	if err := pods.WaitForSync(ctx); err != nil {
		log.Fatal(err)
	}

	pod, ok, err := pods.Get(ctx, "jhub", "jupyter-alice")
	switch {
	case err != nil:
		log.Fatal(err)
	case !ok:
		fmt.Println("jupyter-alice: no such pod")
	default:
		// A cached pod is the compact reflector.Pod, shared: read-only.
		fmt.Println(pod.Name, pod.Phase, pod.PodIP, "ready:", pod.Ready.Status)
	}
	fmt.Println("healthy:", pods.Status().Healthy())
}
