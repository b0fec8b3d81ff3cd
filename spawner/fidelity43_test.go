package spawner

import (
	"slices"
	"strings"
	"testing"
)

// Behaviours of KubeSpawner 7.1 found on configurations the project had
// not seen (issue 43, item 6), each checked on its own. The expectations
// marked "Python" were computed with Python 3 running KubeSpawner's own
// code for the step (recursive_update, recursive_format, get_env, the
// env sorting of make_pod; re.match).

// TestOverrideEnvironmentKeepsInsertionOrder: the environment entries a
// profile's or a choice's kubespawner_override adds come after the base
// entries in the override's order (a Python dict's update); a key set
// again keeps its place, a key set to null leaves and, set again later,
// comes last. Where two entries name one variable, the later in that
// order wins in the pod.
func TestOverrideEnvironmentKeepsInsertionOrder(t *testing.T) {
	const profile = `image: img
secret_env: []
environment: {B: b, A: a}
profile_list:
- display_name: p
  kubespawner_override:
    environment: {Z: z, C: c, B: b2}
  profile_options:
    o:
      display_name: o
      choices:
        one:
          display_name: one
          kubespawner_override:
            environment: {"Y": {name: X, value: fromY}, X: plain, A: null}
    p:
      display_name: p2
      choices:
        two: {display_name: two, kubespawner_override: {environment: {A: again}}}
`
	const unlisted = `image: img
secret_env: []
environment: {B: b, A: a}
profile_list:
- display_name: p
  profile_options:
    o:
      display_name: o
      unlisted_choice:
        enabled: true
        kubespawner_override:
          environment: {"K_{value}": "{value}", "A_{value}": w, B: null}
`
	for _, c := range []struct {
		name, yaml string
		opts       map[string]string
		wantEnv    []string // Objects.Env: get_env's order (Python)
		wantPod    []string // the container's env, name=value (Python)
	}{
		{
			name: "profile then choices", yaml: profile,
			wantEnv: []string{"B", "Z", "C", "Y", "X", "A", "JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE"},
			wantPod: []string{"A=again", "B=b2", "C=c", "JUPYTER_IMAGE=img", "JUPYTER_IMAGE_SPEC=img", "X=plain", "Z=z"},
		},
		{
			name: "unlisted choice names keys", yaml: unlisted, opts: map[string]string{"o--unlisted-choice": "q"},
			wantEnv: []string{"A", "K_q", "A_q", "JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE"},
			wantPod: []string{"A=a", "A_q=w", "JUPYTER_IMAGE=img", "JUPYTER_IMAGE_SPEC=img", "K_q=q"},
		},
		{
			// Keys are names, never rendered: the value goes in as is.
			name: "unlisted value in a key is not escaped", yaml: strings.Replace(unlisted, `"{value}"`, "v", 1),
			opts:    map[string]string{"o--unlisted-choice": "a{b}"},
			wantEnv: []string{"A", "K_a{b}", "A_a{b}", "JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE"},
			wantPod: []string{"A=a", "A_a{b}=w", "JUPYTER_IMAGE=img", "JUPYTER_IMAGE_SPEC=img", "K_a{b}=v"},
		},
		{
			// KubeSpawner's unset environment is {}: a null leaves.
			name: "null over an unset environment", yaml: "image: img\nsecret_env: []\nprofile_list:\n- {display_name: p, kubespawner_override: {environment: {X: null, Y: y}}}\n",
			wantEnv: []string{"Y", "JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE"},
			wantPod: []string{"JUPYTER_IMAGE=img", "JUPYTER_IMAGE_SPEC=img", "Y=y"},
		},
		{
			name: "later entry of one variable wins", yaml: strings.Replace(profile, "{Z: z, C: c, B: b2}", `{X: plain, "Y": {name: X, value: fromY}}`, 1) +
				"", opts: map[string]string{"o": "one"},
			// The choice sets X and Y again: they keep their places.
			wantEnv: []string{"B", "X", "Y", "A", "JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE"},
			wantPod: []string{"A=again", "B=b", "JUPYTER_IMAGE=img", "JUPYTER_IMAGE_SPEC=img", "X=fromY"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := mustPlanYAML(t, c.yaml, StartOptions{UserOptions: c.opts})
			var env []string
			for _, e := range o.Env {
				env = append(env, e.Name)
			}
			if !slices.Equal(env, c.wantEnv) {
				t.Errorf("get_env order %v, want %v", env, c.wantEnv)
			}
			var pod []string
			for _, e := range o.Pod.Spec.Containers[0].Env {
				pod = append(pod, e.Name+"="+e.Value)
			}
			if !slices.Equal(pod, c.wantPod) {
				t.Errorf("pod env %v, want %v", pod, c.wantPod)
			}
		})
	}
}

// TestSecretNameTemplateWithPVCName: KubeSpawner renders
// secret_name_template before the claim's name, so {pvc_name} in it is
// "pvc_name_unavailable!", and uses the secret only with internal SSL. A
// configuration whose secret name uses {pvc_name} loads and starts
// without internal SSL; with it, the secret's name is what KubeSpawner
// renders, refused where that is not a valid name.
func TestSecretNameTemplateWithPVCName(t *testing.T) {
	ssl := &SSL{Key: []byte("k"), Cert: []byte("c")}
	for _, c := range []struct {
		name, template string
		ssl            *SSL
		wantSecret     string // "" with SSL: refused
	}{
		{name: "without internal SSL", template: "{pvc_name}-tls"},
		{name: "with internal SSL, an invalid name", template: "{pvc_name}-tls", ssl: ssl},
		// Python: "{pvc_name:.3}-x".format(pvc_name="pvc_name_unavailable!")
		{name: "with internal SSL, a valid name", template: "{pvc_name:.3}-x", ssl: ssl, wantSecret: "pvc-x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := "storage_pvc_ensure: true\nstorage_capacity: 1Gi\nsecret_name_template: '" + c.template + "'\n"
			o, err := planYAML(t, yaml, StartOptions{SSL: c.ssl})
			switch {
			case c.ssl == nil && err != nil:
				t.Fatalf("refused without internal SSL: %v", err)
			case c.ssl == nil:
				if o.Secret != nil {
					t.Errorf("a secret %q without internal SSL", o.Secret.Name)
				}
			case c.wantSecret == "":
				if err == nil || !strings.Contains(err.Error(), "secret_name") || !strings.Contains(err.Error(), "pvc_name_unavailable!") {
					t.Errorf("err = %v, want one naming secret_name and what {pvc_name} renders as", err)
				}
			case err != nil:
				t.Fatal(err)
			case o.Secret == nil || o.Secret.Name != c.wantSecret:
				t.Errorf("secret %v, want %q", o.Secret, c.wantSecret)
			}
		})
	}
}
