package spawner

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// A start handed the Manager's rendering uses it, start id and all, while
// the names in use are those it was rendered with; once they change, the
// start renders again.
func TestStartUsesTheRenderingDoneAhead(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		stale   bool
		otherID bool
		wantOwn bool // the pod is the rendering handed over
	}{
		{name: "names unchanged", wantOwn: true},
		{name: "names changed since", stale: true},
		{name: "rendered for another user id", otherID: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := naming.Server{Username: "planned-" + map[bool]string{false: "a", true: "b"}[tc.stale] + map[bool]string{false: "", true: "c"}[tc.otherID]}
			s := newSpawner(t, srv, baseConfig(ns))
			defer s.Stop(ctx, StopOptions{Now: true})
			st := s.State()
			objs, err := plan(ctx, srv, &s.b.cfg, &s.names, &st, &StartOptions{}, "feedc0ffee000001")
			if err != nil {
				t.Fatal(err)
			}
			objs.Pod.Labels["example.com/rendered"] = "ahead"
			if tc.stale {
				st.PVCName = "claim-of-another-template"
			}
			rendered := srv
			if tc.otherID {
				rendered.UserID = 42 // the Manager's caller named the server with another id
			}
			ahead := &planned{objects: objs, startID: "feedc0ffee000001", server: rendered, names: namesOf(st)}
			if _, err := s.Start(ctx, StartOptions{planned: ahead}); err != nil {
				t.Fatal(err)
			}
			// The caller's options outlive the start (the Manager's
			// closure does); the rendering, used or not, is not kept by them.
			if ahead.objects != nil {
				t.Error("the caller's options still hold the rendering handed over")
			}
			pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			own := pod.Labels["example.com/rendered"] == "ahead" && pod.Annotations[StartIDAnnotation] == "feedc0ffee000001"
			if own != tc.wantOwn {
				t.Errorf("the pod is the rendering handed over: %v, want %v (labels %v, start id %q)",
					own, tc.wantOwn, pod.Labels, pod.Annotations[StartIDAnnotation])
			}
			if !tc.wantOwn && pod.Annotations[StartIDAnnotation] == "" {
				t.Error("the start rendered again without a start id")
			}
		})
	}
}

// Pod events feed only the progress: a start without OnProgress holds no
// event informer, one with it does.
func TestEventsAreWatchedOnlyForProgress(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	r, err := reflector.New(reflector.Options{Client: cluster.Client})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := New(naming.Server{Username: "events-only-for-progress"}, Options{Client: cluster.Client, Registry: r, Config: baseConfig(ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eventInformers := func() int {
		n := 0
		for key := range r.Status() {
			if key.Resource == reflector.ResourceEvents {
				n++
			}
		}
		return n
	}
	if _, err := s.Start(ctx, StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := eventInformers(); n != 0 {
		t.Errorf("a start without OnProgress runs %d event informers, want none", n)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	var progress []ProgressEvent
	if _, err := s.Start(ctx, StartOptions{OnProgress: func(e ProgressEvent) { progress = append(progress, e) }}); err != nil {
		t.Fatal(err)
	}
	if n := eventInformers(); n != 1 {
		t.Errorf("a start with OnProgress runs %d event informers, want 1", n)
	}
	if len(progress) == 0 || !progress[len(progress)-1].Ready {
		t.Errorf("progress %v does not end ready", progress)
	}
	_ = s.Stop(ctx, StopOptions{Now: true})
}
