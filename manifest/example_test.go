package manifest_test

import (
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/manifest"
)

func ExamplePod() {
	pod, err := manifest.Pod(&manifest.PodSpec{
		Name:   "jupyter-alice",
		Image:  "quay.io/jupyter/base-notebook:2024-01-01",
		Cmd:    []string{"jupyterhub-singleuser"},
		Port:   8888,
		Labels: map[string]string{"component": "singleuser-server"},
	})
	if err != nil {
		panic(err)
	}
	out, _ := yaml.Marshal(pod)
	fmt.Print(string(out))
	// Output:
	// apiVersion: v1
	// kind: Pod
	// metadata:
	//   labels:
	//     component: singleuser-server
	//   name: jupyter-alice
	// spec:
	//   automountServiceAccountToken: false
	//   containers:
	//   - args:
	//     - jupyterhub-singleuser
	//     image: quay.io/jupyter/base-notebook:2024-01-01
	//     name: notebook
	//     ports:
	//     - containerPort: 8888
	//       name: notebook-port
	//     resources: {}
	//     securityContext:
	//       allowPrivilegeEscalation: false
	//   restartPolicy: OnFailure
	// status: {}
}

func ExampleDecodePodSpec() {
	spec, err := manifest.DecodePodSpec([]byte(`{
		"name": "jupyter-bob", "image": "quay.io/jupyter/base-notebook", "port": 8888, "cmd": null,
		"mem_limit": "1G", "cpu_limit": 0.5,
		"env": {"DATA": "$(HOME)/data", "HOME": "/home/jovyan"}
	}`))
	if err != nil {
		panic(err)
	}
	pod, err := manifest.Pod(&spec)
	if err != nil {
		panic(err)
	}
	c := pod.Spec.Containers[0]
	fmt.Println(c.Env[0].Name, c.Env[1].Name)
	fmt.Println(c.Resources.Limits.Cpu(), c.Resources.Limits.Memory())
	// Output:
	// HOME DATA
	// 500m 1G
}
