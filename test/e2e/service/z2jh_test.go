package service

// docs/z2jh.md as a Zero to JupyterHub operator uses it: its values
// parse, the service's configuration in them loads, the binary accepts
// the sidecar's args, the hub pod the chart would assemble from them is
// accepted by a real API server, z2jh's hub Role covers the service's,
// and its singleuser table agrees with docs/kubespawner-options.md and
// with the chart's own jupyterhub_config.py. The chart's facts are
// transcribed from z2jh 4.4.0 (tag 4.4.0, commit 5c5f5df), each with the
// file it comes from.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/service"
	"github.com/spawnkit/spawnkit/spawner"
)

const (
	z2jhDocFile = "../../../docs/z2jh.md"
	// z2jhRelease is the Helm release (and namespace) the page's
	// examples use.
	z2jhRelease = "jhub"
	// z2jhConfigMarker precedes a yaml block that is a service
	// configuration of its own.
	z2jhConfigMarker = "<!-- spawnkit-service config -->"
)

// z2jhHubKeys are the keys of hub: in z2jh 4.4.0's jupyterhub/values.yaml.
var z2jhHubKeys = []string{
	"revisionHistoryLimit", "config", "service", "baseUrl", "cookieSecret", "initContainers", "nodeSelector",
	"tolerations", "concurrentSpawnLimit", "consecutiveFailureLimit", "activeServerLimit", "deploymentStrategy",
	"db", "labels", "annotations", "command", "args", "extraConfig", "extraFiles", "extraEnv", "extraContainers",
	"extraVolumes", "extraVolumeMounts", "image", "resources", "podSecurityContext", "containerSecurityContext",
	"lifecycle", "loadRoles", "services", "pdb", "networkPolicy", "allowNamedServers", "namedServerLimitPerUser",
	"authenticatePrometheus", "redirectToServer", "shutdownOnLogout", "templatePaths", "templateVars",
	"livenessProbe", "readinessProbe", "existingSecret", "serviceAccount", "extraPodSpec",
}

// z2jhHubRules are the rules of the hub's Role in z2jh 4.4.0's
// jupyterhub/templates/hub/rbac.yaml, verbatim.
const z2jhHubRules = `
rules:
  - apiGroups: [""]       # "" indicates the core API group
    resources: ["pods", "persistentvolumeclaims", "secrets", "services"]
    verbs: ["get", "watch", "list", "create", "delete"]
  - apiGroups: [""]       # "" indicates the core API group
    resources: ["events"]
    verbs: ["get", "watch", "list"]
`

// z2jhAssignments are the KubeSpawner (and Spawner) options z2jh 4.4.0's
// jupyterhub/files/hub/jupyterhub_config.py sets from each value: the
// set_config_if_not_none loop over singleuser.*, then image,
// allowPrivilegeEscalation, the image pull secrets, scheduling, the
// tolerations, storage, singleuser.extraFiles, the extra volumes, cmd,
// defaultUrl and the cloud metadata block.
var z2jhAssignments = []struct{ value, option string }{
	{"singleuser.podNameTemplate", "pod_name_template"},
	{"singleuser.startTimeout", "start_timeout"},
	{"singleuser.image.pullPolicy", "image_pull_policy"},
	{"singleuser.events", "events_enabled"},
	{"singleuser.extraLabels", "extra_labels"},
	{"singleuser.extraAnnotations", "extra_annotations"},
	{"singleuser.uid", "uid"},
	{"singleuser.fsGid", "fs_gid"},
	{"singleuser.serviceAccountName", "service_account"},
	{"singleuser.storage.extraLabels", "storage_extra_labels"},
	{"singleuser.nodeSelector", "node_selector"},
	{"singleuser.extraNodeAffinity.required", "node_affinity_required"},
	{"singleuser.extraNodeAffinity.preferred", "node_affinity_preferred"},
	{"singleuser.extraPodAffinity.required", "pod_affinity_required"},
	{"singleuser.extraPodAffinity.preferred", "pod_affinity_preferred"},
	{"singleuser.extraPodAntiAffinity.required", "pod_anti_affinity_required"},
	{"singleuser.extraPodAntiAffinity.preferred", "pod_anti_affinity_preferred"},
	{"singleuser.lifecycleHooks", "lifecycle_hooks"},
	{"singleuser.initContainers", "init_containers"},
	{"singleuser.extraContainers", "extra_containers"},
	{"singleuser.memory.limit", "mem_limit"},
	{"singleuser.memory.guarantee", "mem_guarantee"},
	{"singleuser.cpu.limit", "cpu_limit"},
	{"singleuser.cpu.guarantee", "cpu_guarantee"},
	{"singleuser.extraResource.limits", "extra_resource_limits"},
	{"singleuser.extraResource.guarantees", "extra_resource_guarantees"},
	{"singleuser.extraEnv", "environment"},
	{"singleuser.profileList", "profile_list"},
	{"singleuser.extraPodConfig", "extra_pod_config"},
	{"singleuser.image.name", "image"},
	{"singleuser.image.tag", "image"},
	{"singleuser.allowPrivilegeEscalation", "allow_privilege_escalation"},
	{"imagePullSecret.create", "image_pull_secrets"},
	{"imagePullSecrets", "image_pull_secrets"},
	{"singleuser.image.pullSecrets", "image_pull_secrets"},
	{"scheduling.userScheduler.enabled", "scheduler_name"},
	{"scheduling.podPriority.enabled", "priority_class_name"},
	{"scheduling.userPods.nodeAffinity.matchNodePurpose", "node_affinity_preferred"},
	{"scheduling.userPods.nodeAffinity.matchNodePurpose", "node_affinity_required"},
	{"scheduling.userPods.tolerations", "tolerations"},
	{"singleuser.extraTolerations", "tolerations"},
	{"singleuser.storage.type", "storage_pvc_ensure"},
	{"singleuser.storage.type", "volumes"},
	{"singleuser.storage.type", "volume_mounts"},
	{"singleuser.storage.dynamic.pvcNameTemplate", "pvc_name_template"},
	{"singleuser.storage.dynamic.volumeNameTemplate", "volumes"},
	{"singleuser.storage.dynamic.storageClass", "storage_class"},
	{"singleuser.storage.dynamic.storageAccessModes", "storage_access_modes"},
	{"singleuser.storage.capacity", "storage_capacity"},
	{"singleuser.storage.homeMountPath", "volume_mounts"},
	{"singleuser.storage.dynamic.subPath", "volume_mounts"},
	{"singleuser.storage.static.pvcName", "volumes"},
	{"singleuser.storage.static.subPath", "volume_mounts"},
	{"singleuser.extraFiles", "volumes"},
	{"singleuser.extraFiles", "volume_mounts"},
	{"singleuser.storage.extraVolumes", "volumes"},
	{"singleuser.storage.extraVolumeMounts", "volume_mounts"},
	{"singleuser.cmd", "cmd"},
	{"singleuser.defaultUrl", "default_url"},
	{"singleuser.cloudMetadata.blockWithIptables", "init_containers"},
	{"singleuser.cloudMetadata.ip", "init_containers"},
	{"singleuser.networkTools.image", "init_containers"},
	{"singleuser.networkTools.resources", "init_containers"},
}

func TestZ2JH(t *testing.T) {
	d := readZ2JHDoc(t)
	t.Run("yaml blocks parse", func(t *testing.T) {
		for _, b := range d.blocks {
			var v any
			if err := yaml.Unmarshal([]byte(b.text), &v); err != nil {
				t.Errorf("docs/z2jh.md:%d: the yaml block does not parse: %v", b.line, err)
			}
		}
	})
	v := d.values(t)
	t.Run("hub values are z2jh's", func(t *testing.T) { v.checkKeys(t) })
	t.Run("hub policy loads", func(t *testing.T) {
		file := v.policyFile(t)
		p := startProc(t, "spawnkit-service -check -hub-policy", []string{"SPAWNKIT_SERVICE_TOKEN=z2jh-test-token"}, "-check", "-hub-policy", file)
		if err := p.wait(t, 30*time.Second); err != nil {
			t.Errorf("hub.extraFiles' hub policy: -check -hub-policy %s: %v\n%s", file, err, p.out.String())
		}
		for _, b := range d.blocks {
			if b.config {
				if _, err := kubespawner.Load([]byte(b.text)); err != nil {
					t.Errorf("docs/z2jh.md:%d: %v", b.line, err)
				}
			}
		}
	})
	t.Run("hub settings", func(t *testing.T) { v.checkHubSettings(t) })
	t.Run("sidecar args pass -check", func(t *testing.T) { v.runCheck(t) })
	t.Run("hub pod accepted by the API server", func(t *testing.T) { v.dryRunHubPod(t) })
	t.Run("user pods carry the labels of z2jh's NetworkPolicies", func(t *testing.T) { v.checkUserPod(t) })
	t.Run("z2jh hub Role covers the service's", func(t *testing.T) { d.checkRole(t) })
	t.Run("every option z2jh writes is read", func(t *testing.T) { checkOptionsRead(t) })
}

// z2jhDoc is docs/z2jh.md: its yaml blocks and its lines.
type z2jhDoc struct {
	lines  []string
	blocks []z2jhBlock
}

type z2jhBlock struct {
	line   int // of the opening fence, from 1
	text   string
	config bool // preceded by z2jhConfigMarker
}

func readZ2JHDoc(t *testing.T) *z2jhDoc {
	t.Helper()
	data, err := os.ReadFile(z2jhDocFile)
	if err != nil {
		t.Fatal(err)
	}
	d := &z2jhDoc{lines: strings.Split(string(data), "\n")}
	for i := 0; i < len(d.lines); i++ {
		if strings.TrimSpace(d.lines[i]) != "```yaml" {
			continue
		}
		b := z2jhBlock{line: i + 1, config: i > 0 && strings.TrimSpace(d.lines[i-1]) == z2jhConfigMarker}
		var body []string
		for i++; i < len(d.lines) && strings.TrimSpace(d.lines[i]) != "```"; i++ {
			body = append(body, d.lines[i])
		}
		if i == len(d.lines) {
			t.Fatalf("docs/z2jh.md:%d: the yaml block is not closed", b.line)
		}
		b.text = strings.Join(body, "\n") + "\n"
		d.blocks = append(d.blocks, b)
	}
	if len(d.blocks) == 0 {
		t.Fatal("docs/z2jh.md has no yaml block")
	}
	return d
}

// z2jhValues is the page's config.yaml block: the parts of hub: the
// test reasons about, decoded strictly where they are Kubernetes types.
type z2jhValues struct {
	line  int
	raw   map[string]any // hub:, as parsed
	image struct{ Name, Tag string }
	// config is hub.config: traitlets sections.
	config  map[string]map[string]any
	env     []corev1.EnvVar     // hub.extraEnv, as the chart renders it
	volumes []corev1.Volume     // hub.extraVolumes
	files   map[string]z2jhFile // hub.extraFiles
	sidecar corev1.Container
	// rawSidecar and rawEnv are the sidecar and hub.extraEnv as written
	// (rawEnv rendered as the chart renders it): what the API server is
	// shown, since a decoded container has lost a field whose name's case
	// is wrong (encoding/json matches names regardless of case).
	rawSidecar map[string]any
	rawEnv     []any
}

// z2jhFile is a hub.extraFiles entry; its fields are the chart's
// (values.schema.yaml).
type z2jhFile struct {
	MountPath  string         `json:"mountPath"`
	StringData string         `json:"stringData,omitempty"`
	Data       map[string]any `json:"data,omitempty"`
	BinaryData string         `json:"binaryData,omitempty"`
	Mode       *int32         `json:"mode,omitempty"`
}

// values finds the one block with hub: and decodes it.
func (d *z2jhDoc) values(t *testing.T) *z2jhValues {
	t.Helper()
	var found *z2jhValues
	for _, b := range d.blocks {
		var top map[string]any
		if yaml.Unmarshal([]byte(b.text), &top) != nil || top["hub"] == nil {
			continue
		}
		if found != nil {
			t.Fatalf("docs/z2jh.md:%d and :%d both set hub: the test expects the values in one block", found.line, b.line)
		}
		found = &z2jhValues{line: b.line}
		found.decode(t, top["hub"])
	}
	if found == nil {
		t.Fatal("docs/z2jh.md has no yaml block with hub:")
	}
	return found
}

func (v *z2jhValues) decode(t *testing.T, hub any) {
	t.Helper()
	var ok bool
	if v.raw, ok = hub.(map[string]any); !ok {
		t.Fatalf("docs/z2jh.md:%d: hub is a %T, want a mapping", v.line, hub)
	}
	field := func(key string, into any) {
		t.Helper()
		data, err := yaml.Marshal(v.raw[key])
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			t.Fatalf("docs/z2jh.md:%d: hub.%s: %v", v.line, key, err)
		}
	}
	field("image", &v.image)
	field("config", &v.config)
	field("extraVolumes", &v.volumes)
	var mounts []corev1.VolumeMount // checked here, sent as written
	field("extraVolumeMounts", &mounts)
	field("extraFiles", &v.files)
	// The chart's jupyterhub.extraEnv (templates/_helpers.tpl): a map's
	// string value is the variable's value, a mapping value is the EnvVar
	// with the key as its name.
	var env map[string]any
	field("extraEnv", &env)
	for _, name := range slices.Sorted(maps.Keys(env)) {
		var e corev1.EnvVar
		switch val := env[name].(type) {
		case string:
			e = corev1.EnvVar{Name: name, Value: val}
			v.rawEnv = append(v.rawEnv, map[string]any{"name": name, "value": val})
		case map[string]any:
			data, _ := yaml.Marshal(val)
			if err := yaml.UnmarshalStrict(data, &e); err != nil {
				t.Fatalf("docs/z2jh.md:%d: hub.extraEnv.%s: %v", v.line, name, err)
			}
			e.Name = name
			raw := maps.Clone(val)
			if raw["name"] == nil {
				raw["name"] = name
			}
			v.rawEnv = append(v.rawEnv, raw)
		default:
			t.Fatalf("docs/z2jh.md:%d: hub.extraEnv.%s is a %T: the chart takes a string or a mapping", v.line, name, val)
		}
		v.env = append(v.env, e)
	}
	var containers []corev1.Container
	field("extraContainers", &containers)
	for i, c := range containers {
		if c.Name == "spawnkit-service" {
			v.sidecar = c
			v.rawSidecar, _ = v.raw["extraContainers"].([]any)[i].(map[string]any)
		}
	}
	if v.sidecar.Name == "" {
		t.Fatalf("docs/z2jh.md:%d: hub.extraContainers has no container spawnkit-service", v.line)
	}
}

// checkKeys: every key under hub: is one z2jh's values.yaml has, and
// every hub.extraFiles entry has a mountPath and one kind of content
// (the chart's jupyterhub.extraFiles.validate-file).
func (v *z2jhValues) checkKeys(t *testing.T) {
	for k := range v.raw {
		if !slices.Contains(z2jhHubKeys, k) {
			t.Errorf("docs/z2jh.md:%d: hub.%s is not a value of z2jh 4.4.0 (jupyterhub/values.yaml)", v.line, k)
		}
	}
	for k, f := range v.files {
		n := 0
		for _, set := range []bool{f.StringData != "", f.Data != nil, f.BinaryData != ""} {
			if set {
				n++
			}
		}
		if f.MountPath == "" || n != 1 {
			t.Errorf("docs/z2jh.md:%d: hub.extraFiles.%s needs a mountPath and exactly one of stringData, data, binaryData (the chart fails otherwise)", v.line, k)
		}
	}
}

// arg is the value of the sidecar's -name=value flag.
func (v *z2jhValues) arg(t *testing.T, name string) string {
	t.Helper()
	for _, a := range v.sidecar.Args {
		if val, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return val
		}
	}
	t.Fatalf("the sidecar's args %q have no -%s=", v.sidecar.Args, name)
	return ""
}

// mountOf returns the sidecar's volume mount that file is in, and the
// file's path inside the volume ("" for a subPath mount of file itself).
func (v *z2jhValues) mountOf(t *testing.T, file string) (corev1.VolumeMount, string) {
	t.Helper()
	for _, m := range v.sidecar.VolumeMounts {
		if m.MountPath == file {
			return m, ""
		}
		if rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/"); ok && m.SubPath == "" {
			return m, rel
		}
	}
	t.Fatalf("%s is in none of the sidecar's volumeMounts", file)
	return corev1.VolumeMount{}, ""
}

// hubPolicy is the hub.extraFiles entry the sidecar's -hub-policy names:
// a subPath mount of the chart's volume "files", whose items are the
// entries by key (templates/hub/deployment.yaml).
func (v *z2jhValues) hubPolicy(t *testing.T) string {
	t.Helper()
	file := v.arg(t, "hub-policy")
	m, rel := v.mountOf(t, file)
	key := path.Join(m.SubPath, rel)
	if m.Name != "files" {
		t.Fatalf("-hub-policy %s is on volume %q; the page's policy is in hub.extraFiles, the chart's volume \"files\"", file, m.Name)
	}
	f, ok := v.files[key]
	if !ok || f.StringData == "" {
		t.Fatalf("-hub-policy %s is hub.extraFiles.%s, which has no stringData", file, key)
	}
	return f.StringData
}

// policyFile writes hubPolicy to a file, for the binary's -hub-policy.
func (v *z2jhValues) policyFile(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "hub-policy.yaml")
	writeTestFile(t, file, v.hubPolicy(t))
	return file
}

// tokenSecret is the Secret and key the hub's $SPAWNKIT_SERVICE_TOKEN
// (the Spawner's service_token default) comes from.
func (v *z2jhValues) tokenSecret(t *testing.T) (name, key string) {
	t.Helper()
	for _, e := range v.env {
		if e.Name == "SPAWNKIT_SERVICE_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		}
	}
	t.Fatal("hub.extraEnv has no SPAWNKIT_SERVICE_TOKEN from a secretKeyRef")
	return "", ""
}

// checkHubSettings: JupyterHub loads spawnkit and calls the service
// where the sidecar listens; the sidecar is the image of this version,
// without leader election, and its probes are on -probe-listen's port.
func (v *z2jhValues) checkHubSettings(t *testing.T) {
	if got := v.config["JupyterHub"]["spawner_class"]; got != "spawnkit" {
		t.Errorf("hub.config.JupyterHub.spawner_class is %v, want spawnkit", got)
	}
	pyproject, err := os.ReadFile("../../../python/pyproject.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\[project\.entry-points\."jupyterhub\.spawners"\]\nspawnkit = "spawnkit_jupyterhub:SpawnkitSpawner"$`).Match(pyproject) {
		t.Error(`python/pyproject.toml does not register spawnkit = "spawnkit_jupyterhub:SpawnkitSpawner" in jupyterhub.spawners`)
	}
	// hub.config.SpawnkitSpawner's keys are traits: the class's own, or
	// JupyterHub's Spawner's (jupyterhub/spawner.py).
	class, err := os.ReadFile("../../../python/spawnkit_jupyterhub/spawner.py")
	if err != nil {
		t.Fatal(err)
	}
	for k := range v.config["SpawnkitSpawner"] {
		own := regexp.MustCompile(`(?m)^    ` + regexp.QuoteMeta(k) + ` = [A-Z]\w*\(`).Match(class)
		if !own && !slices.Contains([]string{"start_timeout", "http_timeout", "poll_interval", "environment"}, k) {
			t.Errorf("hub.config.SpawnkitSpawner.%s is no trait of SpawnkitSpawner or of JupyterHub's Spawner", k)
		}
	}
	u, err := url.Parse(fmt.Sprint(v.config["SpawnkitSpawner"]["service_url"]))
	if err != nil || u.Scheme != "http" {
		t.Errorf("hub.config.SpawnkitSpawner.service_url %v: want an http URL (%v)", v.config["SpawnkitSpawner"]["service_url"], err)
	} else if listen := v.arg(t, "listen"); u.Host != listen || !net.ParseIP(u.Hostname()).IsLoopback() {
		t.Errorf("service_url %s: want the sidecar's -listen %s, on loopback", u, listen)
	}
	if v.sidecar.Image != deployImage {
		t.Errorf("the sidecar's image is %s, want %s", v.sidecar.Image, deployImage)
	}
	for _, a := range v.sidecar.Args {
		if strings.HasPrefix(a, "-leader-elect") {
			t.Errorf("the sidecar has %s: one hub replica needs no Lease, and z2jh's Role has none", a)
		}
	}
	_, probePort, err := net.SplitHostPort(v.arg(t, "probe-listen"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", v.sidecar.ReadinessProbe, "/readyz"}, {"livenessProbe", v.sidecar.LivenessProbe, "/livez"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("the sidecar has no httpGet %s", p.what)
			continue
		}
		if got := p.probe.HTTPGet.Path; got != p.path {
			t.Errorf("the sidecar's %s asks %s, want %s", p.what, got, p.path)
		}
		if got := v.containerPort(p.probe.HTTPGet.Port); fmt.Sprint(got) != probePort {
			t.Errorf("the sidecar's %s is on port %v (%d), want -probe-listen's %s", p.what, p.probe.HTTPGet.Port.String(), got, probePort)
		}
	}
	name, key := v.tokenSecret(t)
	m, rel := v.mountOf(t, v.arg(t, "token-file"))
	vol := v.volume(m.Name)
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != name || path.Join(m.SubPath, rel) != key {
		t.Errorf("-token-file %s is not key %q of the Secret %q, which the hub's SPAWNKIT_SERVICE_TOKEN reads (volume %q: %+v)", v.arg(t, "token-file"), key, name, m.Name, vol)
	}
}

// containerPort resolves a probe's port (a number or a port name).
func (v *z2jhValues) containerPort(p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range v.sidecar.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

func (v *z2jhValues) volume(name string) *corev1.Volume {
	for i := range v.volumes {
		if v.volumes[i].Name == name {
			return &v.volumes[i]
		}
	}
	return nil
}

// runCheck runs the binary with the sidecar's args, exactly, and -check:
// each path is mapped into a temporary root, holding what the pod would
// mount there (the page's configuration, a token).
func (v *z2jhValues) runCheck(t *testing.T) {
	root := t.TempDir()
	var args []string
	for _, a := range v.sidecar.Args {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if !ok {
			t.Fatalf("the sidecar's arg %q: the page writes every flag as -name=value", a)
		}
		var content string
		switch name {
		case "hub-policy":
			content = v.hubPolicy(t)
		case "token-file":
			content = "z2jh-test-token\n"
		default:
			args = append(args, a)
			continue
		}
		file := filepath.Join(root, filepath.FromSlash(val))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		writeTestFile(t, file, content)
		args = append(args, "-"+name+"="+file)
	}
	p := startProc(t, "spawnkit-service -check", nil, append(args, "-check")...)
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("-check with the sidecar's args %q: %v\n%s", args, err, p.out.String())
	}
}

// z2jhNamespace makes a namespace for the dry runs; restricted enforces
// the restricted Pod Security profile in it.
func z2jhNamespace(t *testing.T, c *testcluster.Cluster, restricted bool) string {
	t.Helper()
	ns := fmt.Sprintf("z2jh-%d", time.Now().UnixNano()%1e9)
	labels := map[string]string{}
	if restricted {
		labels = map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "latest",
		}
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), ns, metav1.DeleteOptions{})
	})
	return ns
}

// z2jhDryRunPod creates the pod pod (a Pod or its JSON form as a map)
// with a server-side dry-run and strict field validation, failing on an
// error or a warning (an unknown field is one).
func z2jhDryRunPod(t *testing.T, c *testcluster.Cluster, ns string, pod any) {
	t.Helper()
	obj := z2jhMap(t, pod)
	obj["apiVersion"], obj["kind"] = "v1", "Pod"
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	w := &deployWarnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = w
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").
		Param("dryRun", metav1.DryRunAll).Param("fieldValidation", metav1.FieldValidationStrict).
		Body(body).Do(t.Context()).Error()
	if err != nil {
		t.Fatalf("the pod: %v\n%s", err, body)
	}
	if got := w.take(); len(got) > 0 {
		t.Errorf("the pod: warnings %q", got)
	}
}

// z2jhMap is x's JSON form as a map.
func z2jhMap(t *testing.T, x any) map[string]any {
	t.Helper()
	data, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// dryRunHubPod assembles the hub pod as z2jh 4.4.0's
// templates/hub/deployment.yaml does from these values and the chart's
// defaults (values.yaml: hub.podSecurityContext,
// hub.containerSecurityContext, hub.db.type sqlite-pvc), and has a real
// API server accept it where the restricted Pod Security profile is
// enforced.
func (v *z2jhValues) dryRunHubPod(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := z2jhNamespace(t, c, true)
	// The chart's ServiceAccount "hub", which the pod names.
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "hub"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The chart's parts are typed; the page's (hub.extraVolumes,
	// extraVolumeMounts, extraEnv, extraContainers) go in as written.
	raw := func(key string) []any {
		l, _ := v.raw[key].([]any)
		return l
	}
	volumes := []any{
		corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "hub"}}}},
		corev1.Volume{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "hub"}}},
	}
	mounts := []any{
		corev1.VolumeMount{Name: "config", MountPath: "/usr/local/etc/jupyterhub/jupyterhub_config.py", SubPath: "jupyterhub_config.py"},
		corev1.VolumeMount{Name: "config", MountPath: "/usr/local/etc/jupyterhub/z2jh.py", SubPath: "z2jh.py"},
		corev1.VolumeMount{Name: "config", MountPath: "/usr/local/etc/jupyterhub/config/"},
		corev1.VolumeMount{Name: "secret", MountPath: "/usr/local/etc/jupyterhub/secret/"},
	}
	if len(v.files) > 0 {
		files := &corev1.SecretVolumeSource{SecretName: "hub"}
		for _, k := range slices.Sorted(maps.Keys(v.files)) {
			files.Items = append(files.Items, corev1.KeyToPath{Key: k, Path: k, Mode: v.files[k].Mode})
			mounts = append(mounts, corev1.VolumeMount{Name: "files", MountPath: v.files[k].MountPath, SubPath: k})
		}
		volumes = append(volumes, corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{Secret: files}})
	}
	volumes = append(volumes, raw("extraVolumes")...)
	volumes = append(volumes, corev1.Volume{Name: "pvc", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "hub-db-dir"}}})
	mounts = append(mounts, raw("extraVolumeMounts")...)
	mounts = append(mounts, corev1.VolumeMount{Name: "pvc", MountPath: "/srv/jupyterhub"})
	env := append([]any{
		corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: "1"},
		corev1.EnvVar{Name: "HELM_RELEASE_NAME", Value: z2jhRelease},
		corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		corev1.EnvVar{Name: "CONFIGPROXY_AUTH_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "hub"}, Key: "hub.config.ConfigurableHTTPProxy.auth_token"}}},
	}, v.rawEnv...)
	hub := z2jhMap(t, corev1.Container{
		Name:  "hub",
		Image: v.image.Name + ":" + v.image.Tag,
		Args:  []string{"jupyterhub", "--config", "/usr/local/etc/jupyterhub/jupyterhub_config.py", "--upgrade-db"},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8081}},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	})
	hub["volumeMounts"], hub["env"] = mounts, env
	pod := z2jhMap(t, corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hub", Labels: map[string]string{"app": "jupyterhub", "component": "hub", "release": z2jhRelease}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "hub",
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	})
	spec := pod["spec"].(map[string]any)
	spec["volumes"], spec["containers"] = volumes, []any{hub, v.rawSidecar}
	z2jhDryRunPod(t, c, ns, pod)
}

// checkUserPod plans a user's pod from the page's configuration and
// checks the labels and port z2jh 4.4.0's NetworkPolicies select on:
// templates/singleuser/netpol.yaml selects component, app and release
// (jupyterhub.matchLabels) and admits traffic to notebook-port;
// templates/hub/netpol.yaml admits pods labelled
// hub.jupyter.org/network-access-hub; the hub's and the proxy's egress
// go to port 8888. A real API server then accepts the pod (dry run).
func (v *z2jhValues) checkUserPod(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := z2jhNamespace(t, c, false)
	options := z2jhDefaultOptions(t)
	options["namespace"] = json.RawMessage(fmt.Sprintf("%q", ns)) // the vectors' is the release's, jhub
	cfg, err := kubespawner.Config{}.WithOptions(options)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := spawner.Plan(t.Context(), naming.Server{Username: "alice", UserID: 1}, cfg, spawner.StartOptions{HubNamespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	// The policy as the binary reads it ("hub policy loads" runs the
	// binary on it).
	var policy service.HubPolicy
	if err := yaml.UnmarshalStrict([]byte(v.hubPolicy(t)), &policy); err != nil {
		t.Fatal(err)
	}
	if err := policy.Check(); err != nil {
		t.Fatal(err)
	}
	if err := policy.Admit(objs); err != nil {
		t.Errorf("the page's hub policy refuses the chart's default user pod: %v", err)
	}
	if err := (&service.HubPolicy{}).Admit(objs); err == nil || !strings.Contains(err.Error(), "block-cloud-metadata") {
		t.Errorf("the empty hub policy: %v; want block-cloud-metadata refused (the page's entry is needed)", err)
	}
	pod := objs.Pod
	want := map[string]string{
		"component": "singleuser-server", "app": "jupyterhub", "release": z2jhRelease,
		"hub.jupyter.org/network-access-hub": "true",
	}
	for k, val := range want {
		if pod.Labels[k] != val {
			t.Errorf("the user pod's label %s is %q, want %q (labels %v)", k, pod.Labels[k], val, pod.Labels)
		}
	}
	port := false
	for _, p := range pod.Spec.Containers[0].Ports {
		port = port || (p.Name == "notebook-port" && p.ContainerPort == 8888)
	}
	if !port {
		t.Errorf("the user pod's container has no port notebook-port 8888: %+v", pod.Spec.Containers[0].Ports)
	}
	if got, want := pod.Spec.SchedulerName, z2jhRelease+"-user-scheduler"; got != want {
		t.Errorf("the user pod's scheduler is %q, want z2jh's user scheduler %q", got, want)
	}
	if objs.PVC == nil || objs.PVC.Name != "claim-alice" {
		t.Errorf("the user's claim is %v, want claim-alice (KubeSpawner 7's name, which z2jh keeps)", objs.PVC)
	}
	z2jhDryRunPod(t, c, ns, pod)
}

// z2jhDefaultOptions are the c.KubeSpawner settings z2jh 4.4.0's
// jupyterhub_config.py makes of the chart's default values (the vectors'
// default_chart case), k8s model values as their JSON.
func z2jhDefaultOptions(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	data, err := os.ReadFile("../../../spawner/testdata/z2jh-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name      string `json:"name"`
			HubConfig struct {
				KubeSpawner map[string]any `json:"KubeSpawner"`
			} `json:"hub_config"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var unwrap func(any) any
	unwrap = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			if m, ok := v["__k8s_model__"]; ok && m != nil {
				return v["value"]
			}
			out := make(map[string]any, len(v))
			for k, x := range v {
				out[k] = unwrap(x)
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, x := range v {
				out[i] = unwrap(x)
			}
			return out
		}
		return v
	}
	for _, c := range file.Cases {
		if c.Name != "default_chart" {
			continue
		}
		out := map[string]json.RawMessage{}
		for k, v := range c.HubConfig.KubeSpawner {
			raw, err := json.Marshal(unwrap(v))
			if err != nil {
				t.Fatal(err)
			}
			out[k] = raw
		}
		return out
	}
	t.Fatal("the z2jh vectors have no case default_chart")
	return nil
}

// checkRole: z2jh's hub Role, as transcribed, grants every verb of
// deploy/role.yaml's service Role; the transcription is the one
// TestRBACShippedRolesSuffice runs under and the one the page shows.
func (d *z2jhDoc) checkRole(t *testing.T) {
	var z2jh rbacv1.Role
	if err := yaml.UnmarshalStrict([]byte(z2jhHubRules), &z2jh); err != nil {
		t.Fatal(err)
	}
	service := shippedRoles(t)[0]
	for _, g := range grants([]rbacv1.Role{service}) {
		if !slices.ContainsFunc(z2jh.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, g.group) && slices.Contains(r.Resources, g.resource) && slices.Contains(r.Verbs, g.verb)
		}) {
			t.Errorf("deploy/role.yaml's Role %s grants %s, which z2jh's hub Role does not", service.Name, g)
		}
	}
	if got := z2jhHubRoles(t)[0].Rules; !slices.EqualFunc(got, z2jh.Rules, policyRuleEqual) {
		t.Errorf("rbac_test.go's z2jhHubRoles has rules %+v; templates/hub/rbac.yaml has %+v", got, z2jh.Rules)
	}
	shown := false
	for _, b := range d.blocks {
		var r rbacv1.Role
		if yaml.UnmarshalStrict([]byte(b.text), &r) == nil && len(r.Rules) > 0 {
			shown = true
			if !slices.EqualFunc(r.Rules, z2jh.Rules, policyRuleEqual) {
				t.Errorf("docs/z2jh.md:%d shows the rules %+v; templates/hub/rbac.yaml has %+v", b.line, r.Rules, z2jh.Rules)
			}
		}
	}
	if !shown {
		t.Error("docs/z2jh.md does not show z2jh's hub Role's rules")
	}
}

func policyRuleEqual(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
		len(a.ResourceNames) == 0 && len(b.ResourceNames) == 0 && len(a.NonResourceURLs) == 0 && len(b.NonResourceURLs) == 0
}

// kubespawnerOptions reads docs/kubespawner-options.md's table: option
// name to status.
func kubespawnerOptions(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../../../docs/kubespawner-options.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([a-z0-9_]+)` \\| ([a-z ]+) \\|")
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = m[2]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("docs/kubespawner-options.md: read %d options; has its table changed shape?", len(out))
	}
	return out
}

// checkOptionsRead: every option z2jh's jupyterhub_config.py assigns is
// one SpawnkitSpawner reads (in the option list the Python package ships,
// or one of JupyterHub's own Spawner traits) and the service honours
// (docs/kubespawner-options.md does not call it not applicable).
func checkOptionsRead(t *testing.T) {
	options := kubespawnerOptions(t)
	data, err := os.ReadFile("../../../python/spawnkit_jupyterhub/kubespawner_options.json")
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ Name, Status string }
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	shipped := map[string]bool{}
	for _, o := range list {
		shipped[o.Name] = true
	}
	for _, a := range z2jhAssignments {
		switch status, ok := options[a.option]; {
		case !ok:
			t.Errorf("%s (from %s) is not in docs/kubespawner-options.md", a.option, a.value)
		case status == "not applicable":
			t.Errorf("%s (from %s) is not applicable in spawnkit", a.option, a.value)
		case !shipped[a.option]:
			t.Errorf("%s (from %s) is not in the Python Spawner's option list", a.option, a.value)
		}
	}
}
