package spawner

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// tokenStart is a hub's start with an API token under both of
// JupyterHub's names and one other variable.
func tokenStart(token string) StartOptions {
	return StartOptions{Env: []corev1.EnvVar{
		{Name: "JUPYTERHUB_API_TOKEN", Value: token},
		{Name: "JPY_API_TOKEN", Value: token},
		{Name: "JUPYTERHUB_USER", Value: "alice"},
	}}
}

// envOf is the container's env by name.
func envOf(pod *corev1.Pod) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range pod.Spec.Containers[0].Env {
		out[e.Name] = e
	}
	return out
}

func TestSecretEnvPlan(t *testing.T) {
	const token = "tok-5f1c9a0e7b2d4c6e8a1b3d5f7e9c0a2b"
	cases := []struct {
		name      string
		secretEnv []string
		moved     []string // the variables that must reference the Secret
	}{
		{"default", nil, []string{"JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN"}},
		{"empty list: KubeSpawner's plain env", []string{}, nil},
		{"own list", []string{"JUPYTERHUB_USER", "NOT_SET"}, []string{"JUPYTERHUB_USER"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig("hub")
			cfg.SecretEnv = c.secretEnv
			s := newSpawner(t, naming.Server{Username: "alice"}, cfg)
			o, err := s.Plan(t.Context(), tokenStart(token))
			if err != nil {
				t.Fatal(err)
			}
			env := envOf(o.Pod)
			secretName := EnvSecretName(o.Pod.Name)
			for name, e := range env {
				ref := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
					e.ValueFrom.SecretKeyRef.Name == secretName && e.ValueFrom.SecretKeyRef.Key == name && e.Value == ""
				want := false
				for _, m := range c.moved {
					want = want || m == name
				}
				if ref != want {
					t.Errorf("%s = %+v: references the Secret %v, want %v", name, e, ref, want)
				}
			}
			podJSON, err := json.Marshal(o.Pod)
			if err != nil {
				t.Fatal(err)
			}
			movesToken := len(c.moved) == 2
			if strings.Contains(string(podJSON), token) == movesToken {
				t.Errorf("token in the pod spec: %v, want %v", !movesToken, !movesToken)
			}
			if len(c.moved) == 0 {
				if o.EnvSecret != nil {
					t.Errorf("a Secret without variables to hold: %+v", o.EnvSecret.ObjectMeta)
				}
				return
			}
			sec := o.EnvSecret
			if sec == nil {
				t.Fatal("no environment Secret")
			}
			if sec.Name != secretName || sec.Namespace != o.Pod.Namespace || sec.Type != corev1.SecretTypeOpaque || len(sec.Data) != len(c.moved) {
				t.Errorf("Secret %s/%s type %s with %d keys; want %s/%s Opaque with %v", sec.Namespace, sec.Name, sec.Type, len(sec.Data), o.Pod.Namespace, secretName, c.moved)
			}
			for _, m := range c.moved {
				if want := tokenStart(token).Env; string(sec.Data[m]) != valueOf(want, m) {
					t.Errorf("Secret key %s = %q", m, sec.Data[m])
				}
			}
			// What decides ownership and what the sweeper selects on.
			if sec.Labels[naming.LabelManagedBy] != naming.ManagedBySpawnkit || sec.Annotations[naming.AnnotationUsername] != "alice" {
				t.Errorf("Secret labels %v, annotations %v lack spawnkit's marks", sec.Labels, sec.Annotations)
			}
		})
	}
}

func valueOf(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestSecretEnvConfigIsChecked(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"secret_env: [\"BAD KEY\"]", "secret_env[0]"},
		{"secret_env: [A, A]", "secret_env[1]: Duplicate"},
	} {
		_, err := kubespawner.Load([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kubespawner.Load(%s) = %v, want an error naming %s", c.yaml, err, c.want)
		}
	}
	cfg, err := kubespawner.Load([]byte("secret_env: []"))
	if err != nil || cfg.SecretEnv == nil || len(cfg.SecretEnv) != 0 {
		t.Errorf("secret_env: [] loads as %#v, %v; want an empty list (not the default)", cfg.SecretEnv, err)
	}
	cfg, err = kubespawner.Load([]byte("secret_env: null"))
	if err != nil || cfg.WithDefaults().SecretEnv[0] != "JUPYTERHUB_API_TOKEN" {
		t.Errorf("secret_env: null = %#v, %v; want the default", cfg.WithDefaults().SecretEnv, err)
	}
}

func TestFatalReasonSparesTheStartsOwnEnvSecret(t *testing.T) {
	waiting := func(msg string) *reflector.Pod {
		return reflector.NewPod(&corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "notebook", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: msg}}}}}})
	}
	if r, _ := fatalReason(waiting(`secret "jupyter-alice.env" not found`), kubespawner.DefaultFatalReasons, "jupyter-alice.env"); r != "" {
		t.Errorf("the start's own Secret, looked for before the start created it: fatal %s", r)
	}
	if r, _ := fatalReason(waiting(`secret "someone-elses" not found`), kubespawner.DefaultFatalReasons, "jupyter-alice.env"); r != "CreateContainerConfigError" {
		t.Errorf("another missing Secret: reason %q, want fatal", r)
	}
	if r, _ := fatalReason(waiting(`couldn't find key X in Secret ns/jupyter-alice.env`), kubespawner.DefaultFatalReasons, "jupyter-alice.env"); r == "" {
		t.Error("a missing key of the start's Secret is not a race: it must stay fatal")
	}
}

// TestSecretEnvLifecycle: on the simulated cluster the Secret is owned
// by the pod, holds the token, is replaced by the next start (with the
// next token), and the garbage collector deletes it with the pod; the
// token is in neither the pod nor the namespace's events.
func TestSecretEnvLifecycle(t *testing.T) {
	ns := newNamespace(t)
	s := newSpawner(t, naming.Server{Username: "alice"}, baseConfig(ns))
	ctx := ctxTimeout(t, 90*time.Second)
	secrets := cluster.Client.CoreV1().Secrets(ns)
	var lastUID string
	for round, token := range []string{"tok-first-8c2e41d7a9b3", "tok-second-3f6a90c1e5d2"} {
		opts := tokenStart(token)
		opts.OnProgress = func(ProgressEvent) {} // followed: events are read
		if _, err := s.Start(ctx, opts); err != nil {
			t.Fatal(err)
		}
		pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec, err := secrets.Get(ctx, EnvSecretName(pod.Name), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if refs := sec.OwnerReferences; len(refs) != 1 || refs[0].UID != pod.UID || refs[0].Kind != "Pod" {
			t.Errorf("round %d: Secret owned by %+v, want pod %s", round, refs, pod.UID)
		}
		if string(sec.Data["JUPYTERHUB_API_TOKEN"]) != token || string(sec.Data["JPY_API_TOKEN"]) != token {
			t.Errorf("round %d: the Secret holds another token", round)
		}
		if string(sec.UID) == lastUID {
			t.Errorf("round %d: the previous start's Secret was kept, not replaced", round)
		}
		lastUID = string(sec.UID)
		podJSON, _ := json.Marshal(pod)
		events, err := cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventsJSON, _ := json.Marshal(events)
		for what, data := range map[string][]byte{"pod": podJSON, "events": eventsJSON} {
			if strings.Contains(string(data), token) {
				t.Errorf("round %d: the token is in the %s", round, what)
			}
		}
		if round == 0 {
			// A stop whose pod goes leaves the Secret to the garbage
			// collector; the next start must replace a leftover one too.
			if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyEvery(t, 100*time.Millisecond, 60*time.Second, "the Secret to go with its pod", func() error {
			if _, err := secrets.Get(ctx, sec.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the Secret is still there: %v", err)
			}
			return nil
		})
	}
}
