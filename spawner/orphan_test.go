package spawner

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/orphan"
)

// TestEveryObjectIsAttributable: every object a Spawner creates carries
// what orphan needs to find it and name its server, and a server the hub
// knows as running owns all of them.
func TestEveryObjectIsAttributable(t *testing.T) {
	cfg := baseConfig("jhub")
	cfg.EnableUserNamespaces = true
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	srv := naming.Server{Username: "Olga.O@example.com", Servername: "gpu 1"}
	s, err := New(srv, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, StartOptions{SSL: &SSL{Key: []byte("K"), Cert: []byte("C")}}); err != nil {
		t.Fatal(err)
	}
	ns := s.State().Namespace
	list := func(known *orphan.Known) []orphan.Orphan {
		t.Helper()
		got, err := orphan.List(ctx, known, orphan.Options{Client: cluster.Client})
		if err != nil {
			t.Fatal(err)
		}
		var mine []orphan.Orphan
		for _, o := range got {
			if o.Namespace == ns || o.Kind == orphan.KindNamespace && o.Name == ns {
				mine = append(mine, o)
			}
		}
		return mine
	}
	var kinds []orphan.Kind
	for _, o := range list(orphan.NewKnown(0)) {
		if !o.Attributed || o.Server != (orphan.ServerKey{User: srv.Username, Server: srv.Servername}) {
			t.Errorf("%s not attributed to the server: %+v", o, o.Server)
		}
		kinds = append(kinds, o.Kind)
	}
	for _, k := range []orphan.Kind{orphan.KindPod, orphan.KindPVC, orphan.KindSecret, orphan.KindService} {
		if !slices.Contains(kinds, k) {
			t.Errorf("the %s spawnkit created was not found as an orphan of an unknown server (found %v)", k, kinds)
		}
	}
	known := orphan.NewKnown(1)
	known.Add(srv.Username, srv.Servername, true)
	if got := list(known); len(got) != 0 {
		t.Errorf("a running known server's objects reported as orphans: %v", got)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}
