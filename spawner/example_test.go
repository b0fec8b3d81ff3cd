package spawner_test

import (
	"context"
	"fmt"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// Plan renders what a Start would create, with no cluster: here a
// KubeSpawner configuration with a profile that moves the port.
func ExamplePlan() {
	cfg, err := kubespawner.Load([]byte(`
namespace: jhub
image: quay.io/jupyter/base-notebook:2024-01-01
cmd: [jupyterhub-singleuser]
storage_pvc_ensure: true
storage_capacity: 10Gi
profile_list:
- display_name: Small
  slug: small
  default: true
- display_name: Big
  slug: big
  kubespawner_override: {port: 9999, mem_limit: 8G}
`))
	if err != nil {
		panic(err)
	}
	objs, err := spawner.Plan(context.Background(), naming.Server{Username: "Alice@example.com", Servername: "lab"}, cfg,
		spawner.StartOptions{UserOptions: map[string]string{"profile": "big"}})
	if err != nil {
		panic(err)
	}
	c := objs.Pod.Spec.Containers[0]
	fmt.Println("pod:", objs.Pod.Namespace+"/"+objs.Pod.Name)
	fmt.Println("claim:", objs.PVC.Name, objs.PVC.Spec.Resources.Requests.Storage())
	fmt.Println("port:", c.Ports[0].ContainerPort, "args:", c.Args)
	fmt.Println("memory limit:", c.Resources.Limits.Memory())
	fmt.Println("user annotation:", objs.Pod.Annotations[naming.AnnotationUsername])
	// Output:
	// pod: jhub/jupyter-alice-example-com---cdbc73c2--lab
	// claim: claim-alice-example-com---cdbc73c2--lab 10Gi
	// port: 9999 args: [jupyterhub-singleuser]
	// memory limit: 8589934592
	// user annotation: Alice@example.com
}
