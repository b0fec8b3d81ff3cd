package spawner

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// The behaviours of KubeSpawner 7.1 that the random config vectors found
// (issue 28), each checked on its own, so that a case of its kind fails
// here by name, whatever the vector files hold.

// planYAML loads a configuration and plans a start of ada's default
// server in namespace jhub.
func planYAML(t *testing.T, yaml string, opts StartOptions) (*Objects, error) {
	t.Helper()
	cfg, err := kubespawner.Load([]byte(yaml))
	if err != nil {
		return nil, err
	}
	if opts.HubNamespace == "" {
		opts.HubNamespace = "jhub"
	}
	return Plan(t.Context(), naming.Server{Username: "Ada.Lovelace", UserID: 7}, cfg, opts)
}

func mustPlanYAML(t *testing.T, yaml string, opts StartOptions) *Objects {
	t.Helper()
	o, err := planYAML(t, yaml, opts)
	if err != nil {
		t.Fatalf("%s: %v", yaml, err)
	}
	return o
}

// wantRefused asserts that yaml is refused, at load or plan, with an
// error naming every one of names.
func wantRefused(t *testing.T, yaml string, opts StartOptions, names ...string) {
	t.Helper()
	_, err := planYAML(t, yaml, opts)
	if err == nil {
		t.Fatalf("%s: accepted, want an error naming %v", yaml, names)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("%s: error %q does not name %q", yaml, err, n)
		}
	}
}

// TestMemorySpecification: JupyterHub's ByteSpecification. A number is
// int(value) (a bool is an int); a string is a float and one of K, M, G,
// T (powers of 1024); anything else is refused at load, also in a
// profile's override.
func TestMemorySpecification(t *testing.T) {
	for _, c := range []struct {
		value string
		want  int64 // -1: refused
	}{
		{`"1G"`, 1 << 30}, {`"1.5K"`, 1536}, {`"0.5M"`, 1 << 19}, {`100`, 100}, {`100.7`, 100}, {`true`, 1},
		{`"100"`, -1}, {`"1"`, -1}, {`"1Gi"`, -1}, {`""`, -1}, {`"G"`, -1}, {`"1.5X"`, -1}, {`[1]`, -1},
	} {
		yaml := "mem_limit: " + c.value + "\n"
		if c.want < 0 {
			wantRefused(t, yaml, StartOptions{}, "mem_limit")
			wantRefused(t, "profile_list:\n- {display_name: p, kubespawner_override: {mem_limit: "+c.value+"}}\n", StartOptions{}, "mem_limit")
			continue
		}
		o := mustPlanYAML(t, yaml, StartOptions{})
		if q := o.Pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; q.Value() != c.want {
			t.Errorf("mem_limit %s: limit %s, want %d", c.value, q.String(), c.want)
		}
	}
}

// envNames are the names of the notebook container's variables in order.
func envNames(o *Objects) []string {
	var out []string
	for _, e := range o.Pod.Spec.Containers[0].Env {
		out = append(out, e.Name)
	}
	return out
}

func envValue(o *Objects, name string) (corev1.EnvVar, bool) {
	for _, e := range o.Pod.Spec.Containers[0].Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// TestEnvironmentDictEntriesKeepTheirName: make_pod names a dict entry
// after its key only when it has no name of its own; variables are
// stored by name (a later one replaces an earlier one, so environment can
// replace a hub variable), and each round is sorted by the dict key.
func TestEnvironmentDictEntriesKeepTheirName(t *testing.T) {
	hub := []corev1.EnvVar{{Name: "JUPYTERHUB_API_URL", Value: "http://hub:8081/hub/api"}}
	o := mustPlanYAML(t, `secret_env: []
environment:
  zz: {name: AA, value: renamed}
  mm: plain
  other: {name: JUPYTERHUB_API_URL, value: http://elsewhere/}
`, StartOptions{Env: hub})
	names := envNames(o)
	if slices.Contains(names, "zz") || !slices.Contains(names, "AA") {
		t.Fatalf("env %v: want the entry named AA, not after its key zz", names)
	}
	// By key: mm < zz, so mm comes first, although AA < mm by name.
	if slices.Index(names, "mm") > slices.Index(names, "AA") {
		t.Errorf("env %v: a round is sorted by the dict key (mm before zz, named AA)", names)
	}
	if e, _ := envValue(o, "JUPYTERHUB_API_URL"); e.Value != "http://elsewhere/" {
		t.Errorf("JUPYTERHUB_API_URL = %q: the environment entry of that name replaces the hub's", e.Value)
	}
	if n := strings.Count(strings.Join(names, " ")+" ", "JUPYTERHUB_API_URL "); n != 1 {
		t.Errorf("env %v has JUPYTERHUB_API_URL %d times", names, n)
	}
}

// TestEnvironmentNamesRelaxed: variable names follow the API server's
// rule from Kubernetes 1.32 on (printable ASCII but '='), of the dict's
// own name when it has one; image pull secret names are not checked.
func TestEnvironmentNamesRelaxed(t *testing.T) {
	o := mustPlanYAML(t, `environment:
  my.var-1: a
  "with space": b
  "1LEADING_DIGIT": c
  key: {name: "dotted.name", value: d}
image_pull_secrets: [Not_A_DNS_Name]
`, StartOptions{})
	for _, n := range []string{"my.var-1", "with space", "1LEADING_DIGIT", "dotted.name"} {
		if _, ok := envValue(o, n); !ok {
			t.Errorf("env %v lacks %q", envNames(o), n)
		}
	}
	if got := o.Pod.Spec.ImagePullSecrets; len(got) != 1 || got[0].Name != "Not_A_DNS_Name" {
		t.Errorf("imagePullSecrets %v", got)
	}
	wantRefused(t, "environment: {\"A=B\": x}\n", StartOptions{}, "environment[A=B]")
	wantRefused(t, "environment: {ok: {name: \"A=B\", value: x}}\n", StartOptions{}, "A=B")
	wantRefused(t, "environment: {\"tab\\there\": x}\n", StartOptions{}, "environment")
}

// TestSupplementalGIDsThroughInt: make_pod's [int(gid) for gid in
// supplemental_gids], from the configuration and from an override.
func TestSupplementalGIDsThroughInt(t *testing.T) {
	want := []int64{100, 1, 7, 12, 1000}
	for _, yaml := range []string{
		`supplemental_gids: ["100", true, 7.9, " 12 ", "1_000"]` + "\n",
		"profile_list:\n- {display_name: p, kubespawner_override: {supplemental_gids: [\"100\", true, 7.9, \" 12 \", \"1_000\"]}}\n",
	} {
		o := mustPlanYAML(t, yaml, StartOptions{})
		if got := o.Pod.Spec.SecurityContext.SupplementalGroups; !slices.Equal(got, want) {
			t.Errorf("%s: supplementalGroups %v, want %v", yaml, got, want)
		}
	}
	for _, bad := range []string{`["7.9"]`, `["x"]`, `[null]`, `[-1]`, `[2147483648]`} {
		wantRefused(t, "supplemental_gids: "+bad+"\n", StartOptions{}, "supplemental_gids")
	}
}

// TestProfileSlugSchemeAppliesToLaterTemplates: a profile's slug_scheme
// renders the templates expanded after the options load; the names of
// init keep the configured scheme.
func TestProfileSlugSchemeAppliesToLaterTemplates(t *testing.T) {
	base := `slug_scheme: escape
extra_labels: {who: "{username}"}
environment: {WHO: "{username}"}
profile_list:
- display_name: p
  kubespawner_override: {slug_scheme: safe}
`
	o := mustPlanYAML(t, base, StartOptions{})
	escaped := naming.EscapeSlug("Ada.Lovelace")
	safe, _ := naming.SafeSlug("Ada.Lovelace", naming.DefaultMultiSlugLength)
	if escaped == safe {
		t.Fatalf("test user name slugs alike under both schemes: %q", safe)
	}
	if got := o.Pod.Labels["who"]; got != safe {
		t.Errorf("label who=%q, want the profile's scheme's %q", got, safe)
	}
	if e, _ := envValue(o, "WHO"); e.Value != safe {
		t.Errorf("WHO=%q, want %q", e.Value, safe)
	}
	if !strings.Contains(o.Pod.Name, escaped) {
		t.Errorf("pod name %q: want the configured (escape) scheme's %q, computed at init", o.Pod.Name, escaped)
	}
}

// TestEmptyProfileInFormIsNoProfile: options_from_form gives {} without a
// profile, and an empty one is none.
func TestEmptyProfileInFormIsNoProfile(t *testing.T) {
	for _, form := range []map[string][]string{
		{"profile": {""}, "profile-option---image": {"x"}},
		{"profile-option-a--image": {"x"}},
		{"profile": {}},
	} {
		got, err := kubespawner.OptionsFromForm(kubespawner.Config{}, form)
		if err != nil || len(got) != 0 {
			t.Errorf("OptionsFromForm(%v) = %v, %v; want {}", form, got, err)
		}
	}
	got, _ := kubespawner.OptionsFromForm(kubespawner.Config{}, map[string][]string{"profile": {"a"}, "profile-option-a--image": {"x"}, "profile-option-b--image": {"y"}})
	if len(got) != 2 || got["profile"] != "a" || got["image"] != "x" {
		t.Errorf("OptionsFromForm = %v, want profile a and its image", got)
	}
}

// TestSecurityContextNullRemovesDerivedIDs: a null in
// container_security_context or pod_security_context removes what uid,
// gid or fs_gid set, and the context is still sent.
func TestSecurityContextNullRemovesDerivedIDs(t *testing.T) {
	o := mustPlanYAML(t, `uid: 1000
gid: 100
fs_gid: 100
container_security_context: {runAsUser: null}
pod_security_context: {fsGroup: null}
`, StartOptions{})
	csc := o.Pod.Spec.Containers[0].SecurityContext
	if csc == nil || csc.RunAsUser != nil || csc.RunAsGroup == nil || *csc.RunAsGroup != 100 {
		t.Errorf("container securityContext %+v: want runAsUser removed, runAsGroup 100 kept", csc)
	}
	if psc := o.Pod.Spec.SecurityContext; psc == nil || psc.FSGroup != nil {
		t.Errorf("pod securityContext %+v: want fsGroup removed, the context sent", psc)
	}
	o = mustPlanYAML(t, "uid: 1000\ncontainer_security_context: {runAsUser: null}\nallow_privilege_escalation: null\n", StartOptions{})
	if csc := o.Pod.Spec.Containers[0].SecurityContext; csc == nil || csc.RunAsUser != nil {
		t.Errorf("container securityContext %+v: want an empty context (KubeSpawner sends {runAsUser: null})", csc)
	}
	// An id the security context replaces is not checked.
	mustPlanYAML(t, "uid: -1\ncontainer_security_context: {runAsUser: 1000}\n", StartOptions{})
	wantRefused(t, "uid: -1\n", StartOptions{}, "uid")
	wantRefused(t, "uid: 2147483648\n", StartOptions{}, "uid")
}

// TestStorageSelectorAndAccessModes: a selector that selects everything
// is left out; an explicit [] of access modes is refused where a claim is
// made; ReadWriteOncePod goes alone.
func TestStorageSelectorAndAccessModes(t *testing.T) {
	claim := "storage_pvc_ensure: true\nstorage_capacity: 1Gi\n"
	for _, sel := range []string{"{}", "{matchLabels: {}}"} {
		if o := mustPlanYAML(t, claim+"storage_selector: "+sel+"\n", StartOptions{}); o.PVC.Spec.Selector != nil {
			t.Errorf("storage_selector %s: claim selector %v, want none", sel, o.PVC.Spec.Selector)
		}
	}
	if o := mustPlanYAML(t, claim, StartOptions{}); !slices.Equal(o.PVC.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("default access modes %v", o.PVC.Spec.AccessModes)
	}
	wantRefused(t, claim+"storage_access_modes: []\n", StartOptions{}, "storage_access_modes")
	wantRefused(t, claim+"storage_access_modes: [ReadWriteOncePod, ReadWriteOnce]\n", StartOptions{}, "storage_access_modes", "ReadWriteOncePod")
	mustPlanYAML(t, "storage_access_modes: []\n", StartOptions{}) // no claim is made
	wantRefused(t, claim+"storage_selector: {matchLabels: {owner: \"{nope}\"}}\n", StartOptions{}, "storage_selector", "nope")
}

// TestGuaranteeAboveLimitOnFinalResources: the API server compares the
// container's final requests and limits: extra_resource_limits replaces
// mem_limit, and a profile's override decides before the check.
func TestGuaranteeAboveLimitOnFinalResources(t *testing.T) {
	mustPlanYAML(t, "mem_limit: 1.5K\nmem_guarantee: 1G\nextra_resource_limits: {memory: 6Gi}\n", StartOptions{})
	withProfiles := `mem_limit: 64M
mem_guarantee: 256M
profile_list:
- {display_name: big, slug: big, kubespawner_override: {mem_limit: 2G}}
- {display_name: small, slug: small}
`
	o := mustPlanYAML(t, withProfiles, StartOptions{})
	if q := o.Pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("memory limit %s, want the default profile's 2Gi", q.String())
	}
	wantRefused(t, withProfiles, StartOptions{UserOptions: map[string]string{"profile": "small"}}, "mem_guarantee", "mem_limit", "small")
	wantRefused(t, "cpu_limit: 1\nextra_resource_guarantees: {cpu: 2}\n", StartOptions{}, "extra_resource_guarantees[cpu]", "cpu_limit")
}

// TestUnknownOverrideKeysAtLoad: a key of any kubespawner_override that is
// no option is refused at load, naming it, whether or not a start
// chooses that profile.
func TestUnknownOverrideKeysAtLoad(t *testing.T) {
	for _, c := range []struct{ yaml, key string }{
		{"profile_list:\n- {display_name: a, kubespawner_override: {imagee: x}}\n- {display_name: b, default: true}\n", "imagee"},
		{"profile_list:\n- display_name: a\n  profile_options:\n    o:\n      display_name: o\n      choices: {c: {display_name: c, kubespawner_override: {nope: 1}}}\n", "nope"},
		{"profile_list:\n- display_name: a\n  profile_options:\n    o:\n      display_name: o\n      unlisted_choice: {enabled: true, kubespawner_override: {imgae: \"{value}\"}}\n", "imgae"},
	} {
		if _, err := kubespawner.Load([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: kubespawner.Load = %v, want an error naming %q", c.yaml, err, c.key)
		}
	}
}

// TestNamesRefusedOnlyWhereUsed: KubeSpawner renders every name; a claim
// name no claim can have is refused only when a claim is made with it or
// a volume mounts it.
func TestNamesRefusedOnlyWhereUsed(t *testing.T) {
	bad := "pvc_name_template: \"-{username}-\"\n"
	mustPlanYAML(t, bad, StartOptions{})
	wantRefused(t, bad+"storage_pvc_ensure: true\nstorage_capacity: 1Gi\n", StartOptions{}, "pvc_name")
	wantRefused(t, bad+"volumes: [{name: home, persistentVolumeClaim: {claimName: \"{pvc_name}\"}}]\n", StartOptions{}, "claimName", "home")
}

// TestNullCmdIsNoCmd: cmd: null is KubeSpawner's None, the image's own
// command, not [""].
func TestNullCmdIsNoCmd(t *testing.T) {
	for _, yaml := range []string{"cmd: null\n", "cmd: null\nargs: [--debug]\n"} {
		if o := mustPlanYAML(t, yaml, StartOptions{}); len(o.Pod.Spec.Containers[0].Args) != 0 {
			t.Errorf("%s: args %q, want none", yaml, o.Pod.Spec.Containers[0].Args)
		}
	}
}

// TestUnrenderedOptionsNotChecked: an option whose object is not made
// (no claim without storage_pvc_ensure, no namespace without user
// namespaces) renders nothing in KubeSpawner, so its value is not
// refused; once its object is made, it is.
func TestUnrenderedOptionsNotChecked(t *testing.T) {
	for _, c := range []struct{ unused, enable, option string }{
		{"storage_extra_labels: {'-x': y}\n", "storage_pvc_ensure: true\nstorage_capacity: 1Gi\n", "storage_extra_labels"},
		{"storage_capacity: -5Gi\n", "storage_pvc_ensure: true\n", "storage_capacity"},
		{"storage_class: Bad_Class\n", "storage_pvc_ensure: true\nstorage_capacity: 1Gi\n", "storage_class"},
		{"user_namespace_labels: {'a b': x}\n", "enable_user_namespaces: true\n", "user_namespace_labels"},
	} {
		mustPlanYAML(t, c.unused, StartOptions{})
		wantRefused(t, c.unused+c.enable, StartOptions{}, c.option)
	}
}
