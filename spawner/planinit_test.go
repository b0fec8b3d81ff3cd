package spawner

import (
	"reflect"
	"strings"
	"testing"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// TestPlanInitBeforeProfiles checks what KubeSpawner fixes in __init__,
// before a profile applies: names, working_dir's expansion and port's
// default; a profile's values for them come too late.
func TestPlanInitBeforeProfiles(t *testing.T) {
	server := naming.Server{Username: "pat", UserID: 19}
	plan := func(t *testing.T, yaml string) (*Objects, error) {
		t.Helper()
		cfg, err := kubespawner.Load([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return Plan(t.Context(), server, cfg, StartOptions{HubNamespace: "hub"})
	}
	t.Run("base working_dir is expanded", func(t *testing.T) {
		o, err := plan(t, "working_dir: /home/{username}/work\nport: 0\n")
		if err != nil {
			t.Fatal(err)
		}
		c := o.Pod.Spec.Containers[0]
		if c.WorkingDir != "/home/pat/work" || c.Ports[0].ContainerPort != 8888 {
			t.Errorf("workingDir %q, port %d; want /home/pat/work, 8888", c.WorkingDir, c.Ports[0].ContainerPort)
		}
	})
	t.Run("profile values after init", func(t *testing.T) {
		o, err := plan(t, `
working_dir: /home/{username}/work
profile_list:
- display_name: late
  kubespawner_override:
    working_dir: /srv/{username}
    pod_name_template: ignored-{username}
    namespace: other-ns
`)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Pod.Spec.Containers[0].WorkingDir; got != "/srv/{username}" {
			t.Errorf("workingDir %q: a profile's working_dir is not expanded", got)
		}
		if o.Names.Pod != "jupyter-pat" || o.Pod.Name != "jupyter-pat" {
			t.Errorf("pod name %q: a profile's pod_name_template comes after the names", o.Pod.Name)
		}
		if o.Pod.Namespace != "other-ns" || o.Names.Namespace != "other-ns" || o.Names.DNS != "jupyter-pat.hub.svc.cluster.local" {
			t.Errorf("namespace %q / %q, DNS %q: the profile's namespace places the objects, the DNS name is init's", o.Pod.Namespace, o.Names.Namespace, o.Names.DNS)
		}
	})
	t.Run("profile port 0", func(t *testing.T) {
		_, err := plan(t, "profile_list:\n- display_name: zero\n  kubespawner_override:\n    port: 0\n")
		if !kubespawner.IsInvalidConfig(err) || !strings.Contains(err.Error(), "port") {
			t.Errorf("err = %v, want a *ConfigError naming port", err)
		}
	})
}

// TestPlanUnlistedChoiceWithoutProfile: validation_regex holds when the
// user options name no profile (KubeSpawner skips it then).
func TestPlanUnlistedChoiceWithoutProfile(t *testing.T) {
	cfg, err := kubespawner.Load([]byte(`
profile_list:
- display_name: Custom
  profile_options:
    image:
      display_name: Image
      choices:
        minimal: {display_name: minimal, kubespawner_override: {image: "quay.io/jupyter/minimal-notebook:1"}}
      unlisted_choice:
        enabled: true
        validation_regex: '^quay\.io/jupyter/.+:.+$'
        kubespawner_override: {image: "{value}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plan(t.Context(), naming.Server{Username: "alice"}, cfg, StartOptions{HubNamespace: "hub",
		UserOptions: map[string]string{"image--unlisted-choice": "docker.io/evil:latest"}})
	if err == nil || !strings.Contains(err.Error(), "image") {
		t.Errorf("err = %v, want the unlisted choice refused naming image", err)
	}
}

// TestPlanLeavesItsConfigUnchanged renders starts from configurations
// that plan uses as they are (atInit shares them) and ones it copies, and
// compares each with an identical configuration loaded separately: plan
// must never write to the configuration it renders from, which a Spawner
// shares between all its starts.
func TestPlanLeavesItsConfigUnchanged(t *testing.T) {
	for _, yaml := range []string{
		"image: quay.io/jupyter/base-notebook:2024-01-01\nextra_labels: {team: '{username}'}\nvolumes: [{name: home, emptyDir: {}}]\nvolume_mounts: [{name: home, mountPath: '/home/{username}'}]\nenvironment: {GREETING: 'hello {username}'}\n",
		"working_dir: /home/{username}/work\nport: 0\n",
		"profile_list:\n- display_name: small\n  kubespawner_override: {cpu_limit: 1, working_dir: '/srv/{username}'}\n- display_name: large\n  default: true\n  kubespawner_override: {cpu_limit: 4}\n",
	} {
		load := func() *kubespawner.Config {
			c, err := kubespawner.Load([]byte(yaml))
			if err != nil {
				t.Fatal(err)
			}
			c = c.WithDefaults()
			c.Namespace = "hub"
			return &c
		}
		cfg, want := load(), load()
		srv := naming.Server{Username: "pat", UserID: 19}
		namer := testNamer(t, cfg, "hub")
		names, err := namer.Names(srv)
		if err != nil {
			t.Fatal(err)
		}
		st := State{PodName: names.Pod, Namespace: names.Namespace, DNSName: names.DNS}
		for range 2 {
			if _, err := plan(t.Context(), &planInput{server: srv, base: cfg, names: &names, state: &st, opts: &StartOptions{UserOptions: map[string]string{}}, startID: "0123456789abcdef"}); err != nil {
				t.Fatalf("%q: %v", yaml, err)
			}
		}
		// Another user's start after pat's gets its own expansion.
		other := naming.Server{Username: "quinn", UserID: 20}
		onames, err := namer.Names(other)
		if err != nil {
			t.Fatal(err)
		}
		ost := State{PodName: onames.Pod, Namespace: onames.Namespace, DNSName: onames.DNS}
		o, err := plan(t.Context(), &planInput{server: other, base: cfg, names: &onames, state: &ost, opts: &StartOptions{}, startID: "0123456789abcdef"})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range o.Pod.Spec.Containers[0].VolumeMounts {
			if strings.Contains(m.MountPath, "pat") {
				t.Errorf("%q: quinn's pod mounts %s, expanded for pat", yaml, m.MountPath)
			}
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Errorf("plan changed its configuration %q: volume mounts now %+v", yaml, cfg.Pod.VolumeMounts)
		}
	}
}
