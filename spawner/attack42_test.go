package spawner

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// selfRecorded is a pod in ns under name claiming user, whose state
// record names itself (what recordsItself accepts).
func selfRecorded(ns, name, user string) *reflector.Pod {
	rec := State{PodName: name, Namespace: ns, StartID: "s1"}
	return reflector.NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
		naming.AnnotationUsername: user, naming.AnnotationServername: "", naming.AnnotationState: rec.String(), naming.AnnotationStartID: "s1"}}})
}

// TestAttack42OtherUsersNamespaceNeverTrusted: with user namespaces and
// no retired entry, a pod in user B's own namespace claiming user A,
// under A's own pod name or a self-recorded one, is not A's; nor does a
// hub State naming B's namespace make it A's (TrustsNamespace).
func TestAttack42OtherUsersNamespaceNeverTrusted(t *testing.T) {
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	cfg.EnableUserNamespaces = true
	f, err := NewFactory(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	a, b := naming.Server{Username: "alice42"}, naming.Server{Username: "bob42"}
	na, _ := f.namer.Names(a)
	nb, _ := f.namer.Names(b)
	for _, pod := range []*reflector.Pod{selfRecorded(nb.Namespace, na.Pod, a.Username), selfRecorded(nb.Namespace, "x", a.Username)} {
		var pe *PlacementError
		if err := f.CheckPlacement(a, pod, nil); !errors.As(err, &pe) {
			t.Errorf("pod %s/%s claiming alice in bob's namespace: %v, want a PlacementError", pod.Namespace, pod.Name, err)
		}
		if err := f.CheckPlacement(a, pod, &State{PodName: pod.Name, Namespace: pod.Namespace}); err == nil {
			t.Errorf("pod %s/%s claiming alice in bob's namespace trusted with a hub State naming it", pod.Namespace, pod.Name)
		}
	}
	if f.TrustsNamespace(a, nb.Namespace) {
		t.Errorf("bob's namespace %s trusted for alice", nb.Namespace)
	}
}

// TestAttack42RetiredNamespaceIsAnotherUsersOwn: a retired namespace
// (templated or literal) that is, under today's user_namespace_template,
// another user's own namespace must not make pods there trusted for a
// user it was not that user's. (1) z2jh's default template
// "{hubnamespace}-{username}" retired for "{hubnamespace}-user-{username}":
// the retired template renders, for user "user-x", the namespace that is
// user x's own today. (2) a retired literal namespace "<hub>-old", which
// is user "old"'s own namespace today (default template).
func TestAttack42RetiredNamespaceIsAnotherUsersOwn(t *testing.T) {
	hub := newNamespace(t)
	for _, c := range []struct {
		name, template, retired, attacker, victim string
	}{
		{"templated", "{hubnamespace}-user-{username}", "{hubnamespace}-{username}", "x", "user-x"},
		{"literal", "{hubnamespace}-{username}", hub + "-old", "old", "alice"},
	} {
		cfg := baseConfig(hub)
		cfg.EnableUserNamespaces = true
		cfg.UserNamespaceTemplate = c.template
		cfg.RetiredNamespaces = []string{c.retired}
		f, err := NewFactory(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		own, _ := f.namer.Names(naming.Server{Username: c.attacker})
		victim := naming.Server{Username: c.victim}
		if vn, _ := f.namer.Names(victim); vn.Namespace == own.Namespace {
			t.Fatalf("%s: victim and attacker share a namespace: not the case under test", c.name)
		}
		pod := selfRecorded(own.Namespace, "innocent-looking", c.victim)
		if err := f.CheckPlacement(victim, pod, nil); err == nil {
			t.Errorf("%s: a pod in user %q's own namespace %s claiming user %q is trusted as %q's server (retired_namespaces %q)",
				c.name, c.attacker, own.Namespace, c.victim, c.victim, c.retired)
		}
	}
}
