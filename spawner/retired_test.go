package spawner

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// TestStartReplacesThePodUnderEarlierNames: a Spawner whose loaded State
// names a pod under an earlier pod_name_template (still running: a hub
// restarted under a new template) finds it in Poll and, on Start,
// deletes it before it makes the server's pod under today's name: the
// server never has two pods. The claim in use is kept.
func TestStartReplacesThePodUnderEarlierNames(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	ns := newNamespace(t)
	srv := naming.Server{Username: "renamed-alice"}
	old := baseConfig(ns)
	old.PodNameTemplate = "old-{user_server}"
	first := newSpawner(t, srv, old)
	if _, err := first.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	was := first.State()

	now := baseConfig(ns)
	sp := newSpawner(t, srv, now)
	sp.LoadState(was)
	if st, err := sp.Poll(ctx); err != nil || !st.Running {
		t.Fatalf("Poll of the pod under the earlier name = %+v, %v; want running", st, err)
	}
	opts := hubStart()
	var said []string
	opts.OnProgress = func(e ProgressEvent) { said = append(said, e.Message) }
	if _, err := sp.Start(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(said, func(m string) bool { return strings.Contains(m, "earlier pod "+ns+"/"+was.PodName) }) {
		t.Errorf("the start's progress does not say it removes the earlier pod: %q", said)
	}
	got := sp.State()
	if got.PodName != "jupyter-renamed-alice" || got.PodName == was.PodName {
		t.Errorf("the start made pod %q, want today's name", got.PodName)
	}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.Annotations[naming.AnnotationUsername] == srv.Username {
			names = append(names, p.Name)
		}
	}
	if len(names) != 1 || names[0] != got.PodName {
		t.Errorf("alice's pods after the start: %q, want only %q", names, got.PodName)
	}
}

// TestCheckPlacementTrustsRecordsInTrustedPlaces: a pod under a name
// today's template does not give is its server's when its own state
// record names it (name, namespace, start id) or the hub's State does,
// in a namespace the configuration trusts (its own, a retired one);
// a record that names another pod, another start, or a namespace
// outside the trusted ones is not.
func TestCheckPlacementTrustsRecordsInTrustedPlaces(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.RetiredNamespaces = []string{"old-ns", "{hubnamespace}-{username}"}
	f, err := NewFactory(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	srv := naming.Server{Username: "alice"}
	pod := func(ns, name, recName, recNS, recStart, startID string) *reflector.Pod {
		rec := State{PodName: recName, Namespace: recNS, StartID: recStart}
		return reflector.NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
			naming.AnnotationUsername: "alice", naming.AnnotationServername: "", naming.AnnotationState: rec.String(), naming.AnnotationStartID: startID}}})
	}
	for _, c := range []struct {
		name  string
		pod   *reflector.Pod
		hub   *State
		trust bool
	}{
		{"today's name", pod(ns, "jupyter-alice", "", "", "", ""), nil, true},
		{"its record", pod(ns, "nb-alice", "nb-alice", ns, "s1", "s1"), nil, true},
		{"its record, retired namespace", pod("old-ns", "nb-alice", "nb-alice", "old-ns", "s1", "s1"), nil, true},
		{"its record, retired template", pod(ns+"-alice", "nb-alice", "nb-alice", ns+"-alice", "s1", "s1"), nil, true},
		{"the hub's state", pod(ns, "kube-alice", "", "", "", ""), &State{PodName: "kube-alice", Namespace: ns}, true},
		{"record names another pod", pod(ns, "nb-alice", "jupyter-alice", ns, "s1", "s1"), nil, false},
		{"record names another start", pod(ns, "nb-alice", "nb-alice", ns, "s1", "s2"), nil, false},
		{"record without a start id", pod(ns, "nb-alice", "nb-alice", ns, "", ""), nil, false},
		{"untrusted namespace", pod("tenant", "nb-alice", "nb-alice", "tenant", "s1", "s1"), nil, false},
		{"untrusted namespace, today's name", pod("tenant", "jupyter-alice", "", "", "", ""), nil, false},
		{"hub's state elsewhere", pod(ns, "kube-alice", "", "", "", ""), &State{PodName: "other", Namespace: ns}, false},
		{"another user's retired namespace", pod(ns+"-bob", "nb-alice", "nb-alice", ns+"-bob", "s1", "s1"), nil, false},
	} {
		err := f.CheckPlacement(srv, c.pod, c.hub)
		var pe *PlacementError
		if c.trust && err != nil || !c.trust && !errors.As(err, &pe) {
			t.Errorf("%s: CheckPlacement = %v, want trusted %v", c.name, err, c.trust)
		}
	}
}
