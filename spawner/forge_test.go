package spawner

import (
	"strings"
	"testing"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// No configured annotation forges what spawnkit reads back: the owner
// annotations (the raw user and server names), the state record and the
// start id are written after extra_annotations, storage_extra_annotations
// and user_namespace_annotations, on every object a start plans.
func TestConfiguredAnnotationsCannotForgeOwnership(t *testing.T) {
	forged := "{hub.jupyter.org/username: mallory, hub.jupyter.org/servername: stolen, spawnkit.dev/state: 'forged', spawnkit.dev/start-id: forged}"
	cfg := mustLoad(t, everyObjectYAML+strings.ReplaceAll("extra_annotations: F\nstorage_extra_annotations: F\nuser_namespace_annotations: F\n", "F", forged))
	f, _ := clusterFactory(t, "", cfg)
	srv := naming.Server{Username: "ada", Servername: "lab"}
	s, err := f.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o, err := s.Plan(t.Context(), everyObjectStart())
	if err != nil {
		t.Fatal(err)
	}
	for kind, obj := range plannedObjects(t, o) {
		a := obj.GetAnnotations()
		// A user namespace's policy and quota belong to the user, not
		// to one server: they name no server.
		wantServer := srv.Servername
		if kind == "NetworkPolicy" || kind == "ResourceQuota" {
			wantServer = ""
		}
		if a[naming.AnnotationUsername] != srv.Username || a[naming.AnnotationServername] != wantServer {
			t.Errorf("%s %s: owner annotations %q/%q, want %q/%q", kind, obj.GetName(),
				a[naming.AnnotationUsername], a[naming.AnnotationServername], srv.Username, wantServer)
		}
		if id, ok := a[naming.AnnotationStartID]; ok && id == "forged" {
			t.Errorf("%s %s: start id forged by configuration", kind, obj.GetName())
		}
		if st, ok := a[naming.AnnotationState]; ok && st == "forged" {
			t.Errorf("%s %s: state record forged by configuration", kind, obj.GetName())
		}
	}
	st, ok := StateFromPod(reflector.NewPod(o.Pod))
	if !ok || st.PodName != o.Pod.Name {
		t.Errorf("the pod's state record = %+v, %v; want its own, naming pod %s", st, ok, o.Pod.Name)
	}
	if got := o.Pod.Annotations[naming.AnnotationStartID]; got != o.StartID {
		t.Errorf("the pod's start id = %q, want the plan's %q", got, o.StartID)
	}
}
