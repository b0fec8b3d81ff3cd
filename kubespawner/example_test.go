package kubespawner_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/spawnkit/spawnkit/kubespawner"
)

// hubConfig is a KubeSpawner configuration as a hub's values file holds
// it: KubeSpawner's option names, with a profile_list.
const hubConfig = `
namespace: jhub
image: quay.io/jupyter/base-notebook:2024-01-01
cpu_limit: 1
mem_limit: 2G
start_timeout: 600
node_selector: {pool: users}
profile_list:
- display_name: Small
  description: 1 CPU, 2 GB
  default: true
- display_name: GPU
  slug: gpu
  kubespawner_override:
    cpu_limit: 4
    mem_limit: 16G
    node_selector: {accelerator: nvidia}
    extra_resource_limits: {nvidia.com/gpu: "1"}
  profile_options:
    image:
      display_name: Image
      choices:
        pytorch:
          display_name: PyTorch
          default: true
          kubespawner_override: {image: "quay.io/jupyter/pytorch-notebook:cuda12-2024-01-01"}
        tensorflow:
          display_name: TensorFlow
          kubespawner_override: {image: "quay.io/jupyter/tensorflow-notebook:cuda-2024-01-01"}
      unlisted_choice:
        enabled: true
        display_name: Other image
        validation_regex: '^quay\.io/jupyter/.+$'
        kubespawner_override: {image: "{value}"}
`

// Load reads a KubeSpawner configuration under KubeSpawner's option
// names; the pod options land in Config.Pod, profile_list in
// Config.ProfileList, and quantities keep KubeSpawner's meaning (its "2G"
// is 2×1024³ bytes). These are the options every profile starts from;
// Resolve applies a server's choice.
func ExampleLoad() {
	cfg, err := kubespawner.Load([]byte(hubConfig))
	if err != nil {
		panic(err)
	}
	fmt.Println("namespace:", cfg.Namespace)
	fmt.Println("image:", cfg.Pod.Image)
	fmt.Println("cpu limit:", cfg.Pod.CPULimit.String(), "memory limit:", cfg.Pod.MemLimit.String())
	fmt.Println("node selector:", cfg.Pod.NodeSelector)
	fmt.Println("start timeout:", cfg.StartTimeout)
	for _, p := range cfg.ProfileList {
		fmt.Printf("profile %q default=%v options=%d\n", p.DisplayName, p.Default, len(p.ProfileOptions))
	}
	// Output:
	// namespace: jhub
	// image: quay.io/jupyter/base-notebook:2024-01-01
	// cpu limit: 1 memory limit: 2147483648
	// node selector: map[pool:users]
	// start timeout: 600
	// profile "Small" default=true options=0
	// profile "GPU" default=false options=1
}

// Resolve applies a server's user options, as KubeSpawner's
// load_user_options does: the chosen profile's overrides (a mapping such
// as node_selector merges, anything else replaces), then each profile
// option's chosen, unlisted or default choice. Without a profile the
// default one applies; an unknown profile, or an unlisted value that fails
// validation_regex, is a *ProfileError.
func ExampleConfig_Resolve() {
	cfg, err := kubespawner.Load([]byte(hubConfig))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		userOptions map[string]string
	}{
		{"no options", nil},
		{"gpu", map[string]string{"profile": "gpu"}},
		{"gpu, tensorflow", map[string]string{"profile": "gpu", "image": "tensorflow"}},
		{"gpu, own image", map[string]string{"profile": "gpu", "image--unlisted-choice": "quay.io/jupyter/julia-notebook:2024-01-01"}},
		{"gpu, busybox", map[string]string{"profile": "gpu", "image--unlisted-choice": "docker.io/library/busybox"}},
		{"huge", map[string]string{"profile": "huge"}},
	} {
		eff, err := cfg.Resolve(ctx, c.userOptions)
		var profileErr *kubespawner.ProfileError
		if errors.As(err, &profileErr) {
			fmt.Printf("%s: %v\n", c.name, err)
			continue
		} else if err != nil {
			panic(err)
		}
		gpus := eff.Pod.ExtraResourceLimits["nvidia.com/gpu"]
		fmt.Printf("%s: %s cpu=%s mem=%s gpus=%s nodes=%v\n", c.name, eff.Pod.Image,
			eff.Pod.CPULimit.String(), eff.Pod.MemLimit.String(), gpus.String(), eff.Pod.NodeSelector)
	}
	// Output:
	// no options: quay.io/jupyter/base-notebook:2024-01-01 cpu=1 mem=2147483648 gpus=0 nodes=map[pool:users]
	// gpu: quay.io/jupyter/pytorch-notebook:cuda12-2024-01-01 cpu=4 mem=17179869184 gpus=1 nodes=map[accelerator:nvidia pool:users]
	// gpu, tensorflow: quay.io/jupyter/tensorflow-notebook:cuda-2024-01-01 cpu=4 mem=17179869184 gpus=1 nodes=map[accelerator:nvidia pool:users]
	// gpu, own image: quay.io/jupyter/julia-notebook:2024-01-01 cpu=4 mem=17179869184 gpus=1 nodes=map[accelerator:nvidia pool:users]
	// gpu, busybox: kubespawner: unlisted choice "docker.io/library/busybox" for image rejected: it does not match ^quay\.io/jupyter/.+$
	// huge: kubespawner: no such profile: huge; options include: small, gpu
}

// A misspelt option is refused at load with its line and the option
// probably meant.
func ExampleLoad_misspeltOption() {
	_, err := kubespawner.Load([]byte("image: quay.io/jupyter/base-notebook\nmem_gurantee: 1G\n"))
	fmt.Println(err)
	// Output: kubespawner: config: line 2: mem_gurantee: unknown option "mem_gurantee": did you mean "mem_guarantee"? (docs/kubespawner-options.md lists every option)
}
