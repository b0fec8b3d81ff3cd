package spawner

import (
	"context"
	"fmt"
	"testing"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// BenchmarkPlan renders a start's objects under a plain configuration
// (an image and a command; everything else KubeSpawner's defaults), as
// every Start does before its first API call: the configuration is
// validated and the names are made once, when the Spawner is made.
func BenchmarkPlan(b *testing.B) {
	cfg := kubespawner.Config{Namespace: "jhub", Cmd: []string{"jupyterhub-singleuser"}, Pod: manifest.PodSpec{Image: "quay.io/jupyter/base-notebook:latest"}}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	namer := testNamer(b, &cfg, "jhub")
	type server struct {
		srv   naming.Server
		names naming.Names
	}
	servers := make([]server, 1000)
	for i := range servers {
		srv := naming.Server{Username: fmt.Sprintf("user%05d", i), UserID: int64(i + 1)}
		names, err := namer.Names(srv)
		if err != nil {
			b.Fatal(err)
		}
		servers[i] = server{srv, names}
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := servers[i%len(servers)]
		i++
		st := State{PodName: s.names.Pod, Namespace: s.names.Namespace, DNSName: s.names.DNS}
		if _, err := plan(ctx, &planInput{server: s.srv, base: &cfg, names: &s.names, state: &st, opts: &StartOptions{}, startID: "0123456789abcdef"}); err != nil {
			b.Fatal(err)
		}
	}
}

// testNamer is the namer a Spawner makes from the defaulted cfg, with
// hubNS as the hub's namespace.
func testNamer(tb testing.TB, cfg *kubespawner.Config, hubNS string) *naming.Namer {
	tb.Helper()
	nopts, err := cfg.NamingOptions()
	if err != nil {
		tb.Fatal(err)
	}
	nopts.HubNamespace, nopts.Namespace = hubNS, cfg.Namespace
	namer, err := naming.New(nopts)
	if err != nil {
		tb.Fatal(err)
	}
	return namer
}
