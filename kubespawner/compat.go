package kubespawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// deprecatedOptions maps KubeSpawner's deprecated option names to their
// replacements, as its _deprecated_traits: the old value moves to the new
// name unless the new name is set too. singleuser_lifecycle_hooks is not
// in the list: a missing comma in KubeSpawner glued it to the name before
// it, so KubeSpawner ignores it, and so does spawnkit (with a warning).
var deprecatedOptions = func() map[string]string {
	m := map[string]string{"image_spec": "image"}
	for _, old := range []string{
		"singleuser_working_dir", "singleuser_service_account", "singleuser_extra_labels",
		"singleuser_extra_annotations", "singleuser_image_spec", "singleuser_image_pull_policy",
		"singleuser_image_pull_secrets", "singleuser_node_selector", "singleuser_uid", "singleuser_fs_gid",
		"singleuser_supplemental_gids", "singleuser_privileged", "singleuser_extra_pod_config",
		"singleuser_init_containers", "singleuser_extra_container_config", "singleuser_extra_containers",
		"user_storage_class", "user_storage_pvc_ensure", "user_storage_capacity", "user_storage_extra_labels",
		"user_storage_access_modes",
	} {
		m[old] = strings.SplitN(old, "_", 2)[1]
	}
	return m
}()

// hubOptions are options of JupyterHub's base Spawner, and KubeSpawner
// options, that act in the hub rather than on the server's objects: the
// hub puts their effect into the env it passes (StartOptions.Env) or
// handles them itself. Load accepts and keeps them (HubOptions) so
// that a KubeSpawner configuration loads unchanged.
var hubOptions = []string{
	// jupyterhub.spawner.Spawner
	"admin_access", "cookie_options", "oauth_roles", "oauth_scopes", "oauth_client_allowed_scopes",
	"ip", "consecutive_failure_limit", "http_timeout", "poll_interval", "debug", "options_form",
	"options_from_form", "env_keep", "notebook_dir", "default_url", "disable_user_config",
	"hub_connect_url", "ssl_alt_names", "ssl_alt_names_include_local", "auth_state_hook", "pre_spawn_hook",
	"post_stop_hook", "internal_ssl", "internal_trust_bundles", "internal_certs_location", "server_token_scopes",
	// KubeSpawner: the hub's API client and the options form
	"k8s_api_verify_ssl", "k8s_api_ssl_ca_cert", "k8s_api_host", "additional_profile_form_template_paths",
	"profile_form_template", "get_pod_url", "modify_pod_hook", "after_pod_created_hook",
}

// noopOptions are KubeSpawner options that no longer do anything there
// either: accepted with a warning.
var noopOptions = map[string]string{
	"k8s_api_threadpool_workers": "it has no effect since KubeSpawner 4 (asyncio)",
	"hub_connect_ip":             "use JupyterHub's hub_connect_url",
	"hub_connect_port":           "use JupyterHub's hub_connect_url",
	"safe_chars":                 "use slug_scheme",
}

// dictListOptions may be written as a dict in KubeSpawner: the values,
// sorted by key, are the list.
var dictListOptions = []string{
	"volumes", "volume_mounts", "init_containers", "extra_containers", "tolerations",
	"node_affinity_preferred", "node_affinity_required", "pod_affinity_preferred", "pod_affinity_required",
	"pod_anti_affinity_preferred", "pod_anti_affinity_required", "profile_list",
}

// kubespawnerCompat rewrites KubeSpawner's option forms into spawnkit's
// (in place) and returns the warnings KubeSpawner would log.
func kubespawnerCompat(all map[string]json.RawMessage) ([]string, error) {
	var warnings []string
	for _, old := range slices.Sorted(mapKeys(deprecatedOptions)) {
		v, ok := all[old]
		if !ok {
			continue
		}
		delete(all, old)
		newName := deprecatedOptions[old]
		warnings = append(warnings, fmt.Sprintf("%s is deprecated: use %s", old, newName))
		if _, set := all[newName]; set {
			warnings = append(warnings, fmt.Sprintf("ignoring deprecated %s in favor of %s", old, newName))
			continue
		}
		all[newName] = v
	}
	for _, k := range slices.Sorted(mapKeys(noopOptions)) {
		if _, ok := all[k]; ok {
			delete(all, k)
			warnings = append(warnings, fmt.Sprintf("%s is deprecated and ignored: %s", k, noopOptions[k]))
		}
	}
	for _, k := range dictListOptions {
		v, ok := all[k]
		if !ok || !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		keys := slices.Collect(mapKeys(m))
		sort.Strings(keys) // Python's sorted(): code points, so "10" < "2"
		list := make([]json.RawMessage, 0, len(keys))
		for _, key := range keys {
			list = append(list, m[key])
		}
		all[k], _ = json.Marshal(list)
	}
	for _, k := range []string{"cmd", "image_pull_secrets"} {
		var s string
		// null unmarshals into a string without error; it is None in
		// KubeSpawner (no cmd: the image's own), not [""].
		if v, ok := all[k]; ok && string(bytes.TrimSpace(v)) != "null" && json.Unmarshal(v, &s) == nil {
			all[k], _ = json.Marshal([]string{s})
			if k == "image_pull_secrets" {
				warnings = append(warnings, "image_pull_secrets as a string is deprecated: use a list")
			}
		}
	}
	for _, k := range []string{"mem_limit", "mem_guarantee"} {
		v, ok := all[k]
		if !ok {
			continue
		}
		n, err := parseByteSpecification(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if n == nil {
			all[k] = json.RawMessage("null")
		} else {
			all[k] = json.RawMessage(strconv.FormatInt(*n, 10))
		}
	}
	for _, k := range []string{"cpu_limit", "cpu_guarantee"} {
		v, ok := all[k]
		if !ok || string(v) == "null" {
			continue
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return nil, fmt.Errorf("%s: want a number of CPUs (a float, as in KubeSpawner), not %s", k, v)
		}
	}
	return warnings, nil
}

// parseByteSpecification parses JupyterHub's ByteSpecification: an
// integer number of bytes, or a number with one of the suffixes K, M, G,
// T, each a power of 1024; the result is int(float(number) * unit) bytes.
// Kubernetes suffixes (Gi, 500m) are errors, as in JupyterHub, because
// "1G" there means 2^30 bytes, not 10^9.
func parseByteSpecification(raw json.RawMessage) (*int64, error) {
	text := strings.TrimSpace(string(raw))
	if text == "null" {
		return nil, nil
	}
	// JupyterHub's ByteSpecification.validate: an int or float (a bool
	// is an int in Python) is int(value); a string must be a float
	// followed by one of K, M, G, T, so "100" is refused ("10" with the
	// unit "0"), as KubeSpawner refuses it at load.
	switch text {
	case "true", "false":
		n := int64(0)
		if text == "true" {
			n = 1
		}
		return &n, nil
	}
	if !strings.HasPrefix(text, `"`) {
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, fmt.Errorf("%s is not a memory specification", text)
		}
		n := int64(f)
		return &n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	bad := fmt.Errorf("%q is not a valid memory specification: must be an int or a string with suffix K, M, G, T (powers of 1024; Kubernetes suffixes like Gi are not accepted)", s)
	if s == "" {
		return nil, bad
	}
	units := map[byte]float64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
	unit, ok := units[s[len(s)-1]]
	if !ok {
		return nil, bad
	}
	f, err := pyFloat(s[:len(s)-1])
	if err != nil {
		return nil, bad
	}
	v := f * unit
	if math.IsNaN(v) || math.IsInf(v, 0) || v > math.MaxInt64 || v < math.MinInt64 {
		return nil, bad
	}
	n := int64(v)
	return &n, nil
}

// pyFloat parses a number as Python's float() does: surrounding
// whitespace and digit-separating underscores allowed.
func pyFloat(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "_") {
		for i := 0; i < len(s); i++ {
			if s[i] == '_' && (i == 0 || i == len(s)-1 || !isDigit(s[i-1]) || !isDigit(s[i+1])) {
				return 0, fmt.Errorf("invalid number %q", s)
			}
		}
		s = strings.ReplaceAll(s, "_", "")
	}
	if s == "" || strings.ContainsAny(s, "xXpP") {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	return strconv.ParseFloat(s, 64)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
