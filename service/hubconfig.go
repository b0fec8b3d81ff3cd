package service

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/spawner"
)

// HubPolicy bounds what a hub's own configuration (the "config" of a
// start, its c.KubeSpawner options) may make: the service's
// configuration is the operator's base, and the hub's options are set
// over it. Holding the service's token lets a hub choose options, not
// leave these bounds. The zero policy allows none of the pod features
// below; a start whose pod needs one is refused (400, naming the option
// and the container or volume) before anything is created.
//
// The bounds apply to the pod a hub-configured start would create, so
// they cover what the hub's options, its profiles and a user's choices
// add together, and what the service's own configuration adds to such a
// start. Starts without a hub configuration (the service's own alone)
// are the operator's and are not bounded.
type HubPolicy struct {
	// PrivilegedImages are the images (path.Match patterns, such as
	// "quay.io/jupyterhub/k8s-network-tools:*") whose containers may be
	// privileged, add Linux capabilities or allow privilege escalation:
	// z2jh's block-cloud-metadata init container needs its image here.
	PrivilegedImages []string `json:"privileged_images"`
	// HostNamespaces allows hostNetwork, hostPID, hostIPC and host
	// ports.
	HostNamespaces bool `json:"host_namespaces"`
	// HostPaths are the host directories (prefixes) hostPath volumes may
	// name.
	HostPaths []string `json:"host_paths"`
	// ServiceAccounts are the service accounts a hub may give its pods
	// (service_account); the namespace's default is always allowed.
	ServiceAccounts []string `json:"service_accounts"`
	// Namespaces are the namespaces a hub's configuration may put its
	// servers in besides the service's own namespace and its profiles':
	// cmd/spawnkit-service trusts and watches them as it does
	// retired_namespaces.
	Namespaces []string `json:"namespaces"`
	// Refuse refuses every start that carries a configuration: the
	// service's own configuration alone makes pods.
	Refuse bool `json:"refuse"`
}

// Admit checks the objects of a hub-configured start against p: nil, or
// an error naming each feature the pod has that p does not allow, with
// the option that sets it.
func (p *HubPolicy) Admit(o *spawner.Objects) error {
	if o == nil || o.Pod == nil {
		return nil
	}
	spec := &o.Pod.Spec
	var errs []string
	if !p.HostNamespaces {
		for _, f := range []struct {
			on   bool
			name string
		}{{spec.HostNetwork, "hostNetwork"}, {spec.HostPID, "hostPID"}, {spec.HostIPC, "hostIPC"}} {
			if f.on {
				errs = append(errs, fmt.Sprintf("the pod's %s is set (extra_pod_config): host namespaces are not allowed (hub_policy.host_namespaces)", f.name))
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		if !slices.ContainsFunc(p.HostPaths, func(prefix string) bool { return underPath(v.HostPath.Path, prefix) }) {
			errs = append(errs, fmt.Sprintf("volume %q is hostPath %q (volumes): the host directory is not in hub_policy.host_paths", v.Name, v.HostPath.Path))
		}
	}
	if sa := spec.ServiceAccountName; sa != "" && sa != "default" && !slices.Contains(p.ServiceAccounts, sa) {
		errs = append(errs, fmt.Sprintf("service account %q (service_account): not in hub_policy.service_accounts", sa))
	}
	check := func(kind, option string, cs []corev1.Container) {
		for _, c := range cs {
			what := containerRisks(&c, !p.HostNamespaces)
			if len(what) == 0 || p.allowsImage(c.Image, what) {
				continue
			}
			errs = append(errs, fmt.Sprintf("%s %q (%s) %s: image %q is not in hub_policy.privileged_images", kind, c.Name, option, strings.Join(what, ", "), c.Image))
		}
	}
	check("init container", "init_containers", spec.InitContainers)
	check("container", "extra_containers, privileged, allow_privilege_escalation, container_security_context or extra_container_config", spec.Containers)
	if len(errs) > 0 {
		return fmt.Errorf("service: the hub's configuration makes a pod the service's hub_policy does not allow: %s", strings.Join(errs, "; "))
	}
	return nil
}

// containerRisks names what in c needs a privileged image: host ports
// are checked here only when host namespaces are not allowed.
func containerRisks(c *corev1.Container, hostPorts bool) []string {
	var what []string
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil && *sc.Privileged {
			what = append(what, "is privileged")
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			what = append(what, fmt.Sprintf("adds capabilities %v", sc.Capabilities.Add))
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
			what = append(what, "allows privilege escalation")
		}
	}
	if hostPorts {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				what = append(what, fmt.Sprintf("uses host port %d", p.HostPort))
			}
		}
	}
	return what
}

// allowsImage reports whether image may have what containerRisks found:
// host ports never come from an image's allowance.
func (p *HubPolicy) allowsImage(image string, what []string) bool {
	for _, w := range what {
		if strings.HasPrefix(w, "uses host port") {
			return false
		}
	}
	return slices.ContainsFunc(p.PrivilegedImages, func(pattern string) bool {
		ok, err := path.Match(pattern, image)
		return err == nil && ok
	})
}

// underPath reports whether p is dir or beneath it, after cleaning both
// (so "/data/../etc" is not under "/data").
func underPath(p, dir string) bool {
	p, dir = path.Clean("/"+p), path.Clean("/"+dir)
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Check reports a policy that cannot be applied: a pattern path.Match
// refuses, or a relative host path.
func (p *HubPolicy) Check() error {
	var errs []error
	for i, pat := range p.PrivilegedImages {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			errs = append(errs, fmt.Errorf("hub_policy.privileged_images[%d] %q is not a pattern: %v", i, pat, err))
		}
	}
	for i, hp := range p.HostPaths {
		if !strings.HasPrefix(hp, "/") {
			errs = append(errs, fmt.Errorf("hub_policy.host_paths[%d] %q is not an absolute path", i, hp))
		}
	}
	return errors.Join(errs...)
}

// maxConfigDepth bounds the nesting of a hub's configuration: deeper
// JSON is no KubeSpawner configuration, and refusing it early keeps a
// hostile body from costing the decoder's stack.
const maxConfigDepth = 32

// maxHubConfigs bounds the configurations the service keeps loaded;
// past it the least recently used is loaded again when it comes back.
const maxHubConfigs = 64

// hubConfigs loads hub configurations over the base configuration and
// keeps the last maxHubConfigs by content, so that a hub sending the same
// configuration with every start has it loaded, checked and its Factory
// made once. Safe for concurrent use.
type hubConfigs struct {
	base   kubespawner.Config
	policy HubPolicy

	mu    sync.Mutex
	byKey map[[sha256.Size]byte]*list.Element
	lru   list.List // of *hubConfig, most recent first
}

type hubConfig struct {
	key [sha256.Size]byte
	cfg *kubespawner.Config
}

// load returns the configuration raw (a JSON object of option names)
// sets over the base, checked, or a 400 naming the option.
func (h *hubConfigs) load(raw json.RawMessage) (*kubespawner.Config, error) {
	if h.policy.Refuse {
		return nil, errBadRequest(reasonInvalidConfig, errors.New(
			"config: this service takes no configuration from the hub (hub_policy.refuse): remove the hub's KubeSpawner options, or let the operator allow them"))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, errBadRequest(reasonInvalidConfig, fmt.Errorf("config: %w", err))
	}
	key := sha256.Sum256(compact.Bytes())
	h.mu.Lock()
	if el, ok := h.byKey[key]; ok {
		h.lru.MoveToFront(el)
		cfg := el.Value.(*hubConfig).cfg
		h.mu.Unlock()
		return cfg, nil
	}
	h.mu.Unlock()

	if d := jsonDepth(compact.Bytes()); d > maxConfigDepth {
		return nil, errBadRequest(reasonInvalidConfig, fmt.Errorf("config: nested %d deep; a configuration is at most %d deep", d, maxConfigDepth))
	}
	var options map[string]json.RawMessage
	if err := json.Unmarshal(compact.Bytes(), &options); err != nil || options == nil {
		return nil, errBadRequest(reasonInvalidConfig, errors.New("config: must be an object of KubeSpawner option names"))
	}
	cfg, err := h.base.WithOptions(options)
	if err != nil {
		return nil, errBadRequest(reasonInvalidConfig, fmt.Errorf("config: %w", err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byKey == nil {
		h.byKey = map[[sha256.Size]byte]*list.Element{}
	}
	if el, ok := h.byKey[key]; ok { // loaded meanwhile: keep one copy
		return el.Value.(*hubConfig).cfg, nil
	}
	h.byKey[key] = h.lru.PushFront(&hubConfig{key: key, cfg: &cfg})
	if h.lru.Len() > maxHubConfigs {
		last := h.lru.Back()
		h.lru.Remove(last)
		delete(h.byKey, last.Value.(*hubConfig).key)
	}
	return &cfg, nil
}

// jsonDepth is the deepest nesting of objects and arrays in valid JSON.
func jsonDepth(data []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, b := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			deepest = max(deepest, depth)
		case b == '}' || b == ']':
			depth--
		}
	}
	return deepest
}
