package kubespawner

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/naming"
)

// DefaultFatalReasons are container waiting reasons that end a Start at
// once instead of waiting for the start timeout. Image pulls have their
// own rule: a container whose pull fails a second time (ErrImagePull,
// back-off, ErrImagePull again) ends the start; listing ErrImagePull or
// ImagePullBackOff here makes the first occurrence fatal.
var DefaultFatalReasons = []string{"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CrashLoopBackOff"}

// DefaultSecretEnv are the variables kept out of the pod spec by default:
// the server's JupyterHub API token under both of the names JupyterHub
// gives it. Anyone who can read pods (kubectl get pod -o yaml, a
// monitoring agent, an error that prints the pod) would otherwise read
// the token, and with it act as the user.
var DefaultSecretEnv = []string{"JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN"}

// WithDefaults returns c with KubeSpawner's defaults filled in.
func (c Config) WithDefaults() Config {
	if c.source == nil && (len(c.ProfileList) > 0 || c.ProfileListFunc != nil) {
		// A Config built in Go: its profiles merge into the options it
		// was given, not into the defaults below, as a loaded Config's
		// do. On error source stays nil, and validate reports it.
		if opts, errs := c.typedOptions(); len(errs) == 0 {
			c.source = opts
		}
	}
	if c.Port == 0 {
		c.Port = 8888
	}
	if c.ComponentLabel == "" {
		c.ComponentLabel = naming.DefaultComponent
	}
	if c.CommonLabels == nil {
		c.CommonLabels = naming.KubeSpawnerCommonLabels()
	}
	if c.StorageAccessModes == nil {
		// Unset only: an explicit [] is refused (validateOptions), as
		// the API server refuses a claim without access modes.
		c.StorageAccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 300
	}
	if c.K8sAPIRequestTimeout == 0 {
		c.K8sAPIRequestTimeout = 3
	}
	if c.K8sAPIRequestRetryTimeout == 0 {
		c.K8sAPIRequestRetryTimeout = 30
	}
	if c.UnschedulableTimeout == nil {
		c.UnschedulableTimeout = ptr.To[Seconds](120)
	}
	if c.DeleteGracePeriod == nil {
		c.DeleteGracePeriod = ptr.To[Seconds](1)
	}
	if c.Pod.Image == "" {
		c.Pod.Image = DefaultImage
	}
	if c.SlowSpawnMessageAfter == 0 {
		c.SlowSpawnMessageAfter = c.SlowSpawnMessageThreshold
	}
	if c.SlowSpawnMessageAfter == 0 {
		c.SlowSpawnMessageAfter = 30
	}
	if c.SecretMountPath == "" {
		c.SecretMountPath = "/etc/jupyterhub/ssl/"
	}
	if c.FatalReasons == nil {
		c.FatalReasons = DefaultFatalReasons
	}
	if c.SecretEnv == nil {
		c.SecretEnv = DefaultSecretEnv
	}
	return c
}

// DefaultImage is KubeSpawner 7.1's default image.
const DefaultImage = "quay.io/jupyterhub/singleuser:latest"

// AtInit is for package spawner, which renders a server. It returns a
// copy of c as KubeSpawner's __init__ leaves it for the
// server whose fields are given, before any profile applies: port 0 is
// 8888 and working_dir is expanded, in the fields and in the option
// values profiles merge into. A profile's port or working_dir, applied
// later, is used as it is, and its name templates and namespace come too
// late to change the names.
func (c *Config) AtInit(fields *naming.Fields) (*Config, error) {
	out := *c
	if out.Port == 0 {
		out.Port = 8888
	}
	if out.source != nil {
		out.source = maps.Clone(out.source)
		out.source["port"] = out.Port
	}
	if out.Pod.WorkingDir != "" {
		wd, err := out.Expand(out.Pod.WorkingDir, *fields)
		if err != nil {
			return nil, fmt.Errorf("working_dir: %w", err)
		}
		out.Pod.WorkingDir = wd
		for _, k := range []string{"working_dir", "singleuser_working_dir"} {
			if _, ok := out.source[k]; ok {
				out.source[k] = wd
			}
		}
	}
	return &out, nil
}
