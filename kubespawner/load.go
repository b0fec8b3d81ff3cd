package kubespawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/manifest"
)

// podOptionKeys are the KubeSpawner options that are make_pod arguments.
var podOptionKeys = []string{
	"image", "image_pull_policy", "image_pull_secrets", "node_selector", "uid", "gid", "fs_gid",
	"supplemental_gids", "privileged", "allow_privilege_escalation", "container_security_context",
	"pod_security_context", "working_dir", "volumes", "volume_mounts", "cpu_limit", "cpu_guarantee",
	"mem_limit", "mem_guarantee", "extra_resource_limits", "extra_resource_guarantees", "lifecycle_hooks",
	"init_containers", "service_account", "automount_service_account_token", "extra_container_config",
	"extra_pod_config", "extra_containers", "scheduler_name", "tolerations", "node_affinity_preferred",
	"node_affinity_required", "pod_affinity_preferred", "pod_affinity_required", "pod_anti_affinity_preferred",
	"pod_anti_affinity_required", "priority_class_name",
}

// Load reads a configuration in YAML or JSON with KubeSpawner's
// option names. An unknown key, a value of the wrong type or a malformed
// quantity is an error naming the key.
func Load(data []byte) (Config, error) { return loadConfig(data, nil) }

// loadConfig is Load; adjust, when set, changes the decoded Config
// before it is checked (Override gives it the profile list and Go-only
// fields of the Config it overrides).
func loadConfig(data []byte, adjust func(*Config)) (Config, error) {
	jsonData, err := yamlToJSON(data)
	if err != nil {
		return Config{}, fmt.Errorf("kubespawner: config is neither YAML nor JSON: %w", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(jsonData, &all); err != nil {
		return Config{}, fmt.Errorf("kubespawner: config must be a mapping of option names: %w", err)
	}
	// Unknown keys first, each with its line and the name probably meant:
	// the decoder below would name only the first, with neither.
	if err := checkKeys(data, adjust == nil); err != nil {
		return Config{}, fmt.Errorf("kubespawner: config: %w", err)
	}
	warnings, err := kubespawnerCompat(all)
	if err != nil {
		return Config{}, fmt.Errorf("kubespawner: config: %w", err)
	}
	pod := map[string]json.RawMessage{}
	own := map[string]json.RawMessage{}
	hub := map[string]json.RawMessage{}
	var envRaw json.RawMessage
	for k, v := range all {
		switch {
		case k == "environment":
			envRaw = v
		case slices.Contains(hubOptions, k):
			hub[k] = v
		case slices.Contains(podOptionKeys, k):
			pod[k] = v
		default:
			own[k] = v
		}
	}
	var c Config
	if len(hub) > 0 {
		c.HubOptions = hub
	}
	if envRaw != nil {
		if c.environment, c.Environment, err = decodeEnvironment(envRaw); err != nil {
			return Config{}, fmt.Errorf("kubespawner: config: environment: %w", err)
		}
	}
	ownJSON, _ := json.Marshal(own)
	dec := json.NewDecoder(bytes.NewReader(ownJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("kubespawner: config: %w", err)
	}
	podJSON, _ := json.Marshal(pod)
	if c.Pod, err = manifest.DecodePodSpec(podJSON); err != nil {
		return Config{}, fmt.Errorf("kubespawner: config: %w", err)
	}
	if c.source, err = decodeSource(jsonData); err != nil {
		return Config{}, fmt.Errorf("kubespawner: config: %w", err)
	}
	if len(c.Args) > 0 && len(c.Cmd) == 0 {
		warnings = append(warnings, fmt.Sprintf("ignoring args %q: without cmd the image's command is used; set cmd to pass arguments", c.Args))
	}
	c.warnings = warnings
	if adjust != nil {
		adjust(&c)
	}
	// Every option is checked here, so a bad value is reported at load
	// (all problems at once, by key) and never reaches a start. The
	// default image fills an absent option only: an explicit "" is an
	// error, as the API server would reject the pod.
	check := c.WithDefaults()
	if raw, ok := all["image"]; ok && strings.TrimSpace(string(raw)) == `""` {
		check.Pod.Image = ""
	}
	if check.Namespace == "" {
		check.Namespace = metav1.NamespaceDefault // detected at New; any valid name checks the rest
	}
	if err := check.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Warnings are what loading the configuration would have KubeSpawner
// log: deprecated option names, ignored options and arguments.
func (c Config) Warnings() []string { return slices.Clone(c.warnings) }
