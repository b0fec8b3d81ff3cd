package spawner

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// A start handed a plan (Spawner.Plan) carries it out, start id and
// all, while it was made by a Spawner of the same Factory and server with
// the names in use now, and only once; otherwise the start renders again.
func TestStartCarriesOutItsPlan(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		plan    func(t *testing.T, s *Spawner, opts StartOptions) *Objects
		wantOwn bool // the pod is the plan handed over
	}{
		{name: "planned by this Spawner", wantOwn: true, plan: func(t *testing.T, s *Spawner, opts StartOptions) *Objects {
			return mustPlan(t, s, opts)
		}},
		{name: "planned by another Spawner of the Factory", wantOwn: true, plan: func(t *testing.T, s *Spawner, opts StartOptions) *Objects {
			other, err := s.b.New(s.Server())
			if err != nil {
				t.Fatal(err)
			}
			return mustPlan(t, other, opts)
		}},
		{name: "names changed since", plan: func(t *testing.T, s *Spawner, opts StartOptions) *Objects {
			p := mustPlan(t, s, opts)
			st := s.State()
			st.PVCName = "claim-of-another-template"
			s.LoadState(st)
			return p
		}},
		{name: "planned for another server", plan: func(t *testing.T, s *Spawner, opts StartOptions) *Objects {
			other, err := s.b.New(naming.Server{Username: s.Server().Username, UserID: 42})
			if err != nil {
				t.Fatal(err)
			}
			return mustPlan(t, other, opts)
		}},
		{name: "planned by another Factory", plan: func(t *testing.T, s *Spawner, opts StartOptions) *Objects {
			return mustPlan(t, newSpawner(t, s.Server(), baseConfig(ns)), opts)
		}},
		{name: "a dry run's objects", plan: func(t *testing.T, s *Spawner, opts StartOptions) *Objects {
			p, err := Plan(ctx, s.Server(), baseConfig(ns), opts)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{name: "taken by an earlier start", plan: func(t *testing.T, s *Spawner, opts StartOptions) *Objects {
			p := mustPlan(t, s, opts)
			p.taken.Store(true)
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := naming.Server{Username: "planned-" + strings.ReplaceAll(tc.name, " ", "-")}
			s := newSpawner(t, srv, baseConfig(ns))
			defer s.Stop(ctx, StopOptions{Now: true})
			opts := hubStart()
			p := tc.plan(t, s, opts)
			p.Pod.Labels["example.com/rendered"] = "ahead"
			opts.Plan = p
			if _, err := s.Start(ctx, opts); err != nil {
				t.Fatal(err)
			}
			pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			own := pod.Labels["example.com/rendered"] == "ahead" && p.StartID != "" && pod.Annotations[naming.AnnotationStartID] == p.StartID
			if own != tc.wantOwn {
				t.Errorf("the pod is the plan handed over: %v, want %v (labels %v, start id %q, plan's %q)",
					own, tc.wantOwn, pod.Labels, pod.Annotations[naming.AnnotationStartID], p.StartID)
			}
			if pod.Annotations[naming.AnnotationStartID] == "" {
				t.Error("the start has no start id")
			}
			if tc.wantOwn && !p.taken.Load() {
				t.Error("the plan carried out is not marked taken")
			}
		})
	}
}

func mustPlan(t *testing.T, s *Spawner, opts StartOptions) *Objects {
	t.Helper()
	p, err := s.Plan(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.StartID == "" {
		t.Fatal("Spawner.Plan gave no start id")
	}
	return p
}

// Pod events feed the progress and the trace: a start with neither
// (no OnProgress, no TracerProvider), even with unschedulable_timeout set,
// holds no event informer; one with OnProgress does.
func TestEventsAreWatchedOnlyWhenNeeded(t *testing.T) {
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
		t.Errorf("a start without OnProgress or a tracer runs %d event informers, want none", n)
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
