package spawner

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// TestLoadRejectsBadOptions: every bad value is reported by key, all at
// once, before anything exists (Plan, which Start runs first, fails).
func TestLoadRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		keys       []string
	}{
		{"port too big", "port: 70000", []string{"port"}},
		{"port negative", "port: -1", []string{"port"}},
		{"negative memory", "mem_limit: -1G", []string{"mem_limit"}},
		{"guarantee over limit", "mem_limit: 1G\nmem_guarantee: 2G", []string{"mem_guarantee"}},
		{"negative cpu", "cpu_guarantee: -1", []string{"cpu_guarantee"}},
		{"huge memory", "mem_limit: 1E999999999", nil},
		{"huge cpu", "cpu_limit: 1E999999999", nil},
		{"huge capacity", "storage_pvc_ensure: true\nstorage_capacity: 1e100000", []string{"storage_capacity"}},
		{"huge extra resource", "extra_resource_limits: {nvidia.com/gpu: 1e30}", []string{"extra_resource_limits[nvidia.com/gpu]"}},
		{"bad label key", "extra_labels: {'bad key!': x}", []string{"extra_labels"}},
		{"bad label value", "extra_labels: {team: 'has space'}", []string{"extra_labels"}},
		{"templated label renders invalid", "extra_labels: {team: '{username} x'}", []string{"extra_labels"}},
		{"bad annotation key", "extra_annotations: {'a/b/c': x}", []string{"extra_annotations"}},
		{"bad storage label", "storage_pvc_ensure: true\nstorage_capacity: 1Gi\nstorage_extra_labels: {'-x': y}", []string{"storage_extra_labels"}},
		{"bad common label", "common_labels: {app: 'no way'}", []string{"common_labels"}},
		{"bad namespace label", "enable_user_namespaces: true\nuser_namespace_labels: {'a b': x}", []string{"user_namespace_labels"}},
		{"bad namespace annotation", "enable_user_namespaces: true\nuser_namespace_annotations: {'-': x}", []string{"user_namespace_annotations"}},
		{"bad template", "extra_labels: {team: '{nosuch}'}", []string{"extra_labels"}},
		{"whitespace image", "image: 'a b'", []string{"image"}},
		{"negative start timeout", "start_timeout: -1", []string{"start_timeout"}},
		{"negative request timeout", "k8s_api_request_timeout: -3", []string{"k8s_api_request_timeout"}},
		{"negative grace", "delete_grace_period: -1", []string{"delete_grace_period"}},
		{"huge timeout", "start_timeout: 1e300", []string{"start_timeout"}},
		{"bad namespace", "namespace: Not_A_Namespace", []string{"namespace"}},
		{"bad env name", "environment: {'1BAD=': x}", []string{"environment[1BAD=]"}},
		{"bad storage capacity", "storage_pvc_ensure: true\nstorage_capacity: -5Gi", []string{"storage_capacity"}},
		{"bad access mode", "storage_pvc_ensure: true\nstorage_capacity: 1Gi\nstorage_access_modes: [ReadSometimes]", []string{"storage_access_modes[0]"}},
		{"bad service account", "service_account: 'Bad_SA'", []string{"service_account"}},
		{"bad pull policy", "image_pull_policy: Sometimes", []string{"image_pull_policy"}},
		{"bad node selector", "node_selector: {'a b': c}", []string{"node_selector"}},
		{"bad slug scheme", "slug_scheme: rot13", []string{"slug_scheme"}},
		{"bad regex", "profile_list: [{display_name: A, profile_options: {img: {unlisted_choice: {enabled: true, validation_regex: '(?=x)'}}}}]", nil},
		{"all at once", "port: 0\nimage: 'x y'\nstart_timeout: -1\nextra_labels: {'!': x}", []string{"image", "start_timeout", "extra_labels"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.yaml
			if !strings.Contains(doc, "image:") {
				doc = "image: base:1\n" + doc
			}
			cfg, err := kubespawner.Load([]byte(doc))
			if err == nil {
				_, err = Plan(t.Context(), naming.Server{Username: "u"}, cfg, StartOptions{})
			}
			if err == nil {
				t.Fatalf("%q accepted", tc.yaml)
			}
			if tc.keys == nil {
				return // rejected by the loader, with its own message
			}
			var ce *kubespawner.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			for _, k := range tc.keys {
				if !slices.ContainsFunc(ce.Keys(), func(got string) bool { return strings.HasPrefix(got, k) }) {
					t.Errorf("keys %v do not name %s (%v)", ce.Keys(), k, err)
				}
			}
		})
	}
}

const userProfileYAML = `
image: base:1
storage_pvc_ensure: true
storage_capacity: 1Gi
profile_list:
- display_name: Custom
  profile_options:
    mem:
      display_name: Memory
      choices:
        small: {display_name: Small, kubespawner_override: {mem_limit: 1G}}
      unlisted_choice:
        enabled: true
        kubespawner_override:
          mem_limit: "{value}"
    env:
      display_name: Env
      choices:
        none: {display_name: None}
      unlisted_choice:
        enabled: true
        validation_regex: "[a-z{}. $\"]+"
        kubespawner_override:
          environment: {CHOICE: "{value}"}
    lbl:
      display_name: Label
      choices:
        none: {display_name: None}
      unlisted_choice:
        enabled: true
        kubespawner_override:
          extra_labels: {choice: "x{value}"}
`

// TestUnlistedChoiceIsData: a user's value with template syntax of either
// kind renders as itself, never as a template.
func TestUnlistedChoiceIsData(t *testing.T) {
	for _, syntax := range []string{"kubespawner", "go"} {
		cfg, err := kubespawner.Load([]byte("template_syntax: " + syntax + "\n" + userProfileYAML))
		if err != nil {
			t.Fatal(err)
		}
		for _, value := range []string{"{username}", "{{ .Username }}", "{{ env \"HOME\" }}", "{{", "}}{", "{{{"} {
			objs, err := Plan(t.Context(), naming.Server{Username: "alice"}, cfg, StartOptions{UserOptions: map[string]string{"env--unlisted-choice": value}})
			if err != nil {
				t.Fatalf("%s %q: %v", syntax, value, err)
			}
			var got string
			for _, e := range objs.Pod.Spec.Containers[0].Env {
				if e.Name == "CHOICE" {
					got = e.Value
				}
			}
			if got != value {
				t.Errorf("%s: unlisted choice %q rendered as %q", syntax, value, got)
			}
		}
	}
}

// TestBadStartCreatesNothing: a start whose user options make the
// configuration invalid fails before it creates anything.
func TestBadStartCreatesNothing(t *testing.T) {
	ns := newNamespace(t)
	cfg, err := kubespawner.Load([]byte("namespace: " + ns + "\n" + userProfileYAML))
	if err != nil {
		t.Fatal(err)
	}
	s := newSpawner(t, naming.Server{Username: "mallory"}, cfg)
	ctx := ctxTimeout(t, 30*time.Second)
	before := countObjects(t, ns)
	for _, opts := range []map[string]string{
		{"mem--unlisted-choice": "-1G"},
		{"mem--unlisted-choice": "lots"},
		{"lbl--unlisted-choice": "a b"},
		{"lbl--unlisted-choice": "{username}"},
		{"profile": "nosuch"},
		{"env": "nosuch"},
	} {
		if _, err := s.Start(ctx, StartOptions{UserOptions: opts}); err == nil {
			t.Errorf("Start with %v succeeded", opts)
		}
	}
	if after := countObjects(t, ns); after != before {
		t.Errorf("objects in %s: %s before, %s after failed starts", ns, before, after)
	}
}

func countObjects(t *testing.T, ns string) string {
	t.Helper()
	ctx := t.Context()
	c := cluster.Client.CoreV1()
	pods, err1 := c.Pods(ns).List(ctx, metav1.ListOptions{})
	pvcs, err2 := c.PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	secrets, err3 := c.Secrets(ns).List(ctx, metav1.ListOptions{})
	svcs, err4 := c.Services(ns).List(ctx, metav1.ListOptions{})
	nss, err5 := c.Namespaces().List(ctx, metav1.ListOptions{})
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("pods=%d pvcs=%d secrets=%d services=%d namespaces=%d", len(pods.Items), len(pvcs.Items), len(secrets.Items), len(svcs.Items), len(nss.Items))
}
