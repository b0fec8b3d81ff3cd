package spawner

import (
	"context"
	"testing"

	"github.com/spawnkit/spawnkit/naming"
)

// BenchmarkPoll polls a running server: a cache read, no API call.
func BenchmarkPoll(b *testing.B) {
	ns := newNamespace(b)
	s := newSpawner(b, naming.Server{Username: "bench"}, baseConfig(ns))
	ctx := context.Background()
	if _, err := s.Start(ctx, StartOptions{}); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(ctx, StopOptions{Now: true})
	b.ReportAllocs()
	for b.Loop() {
		status, err := s.Poll(ctx)
		if err != nil || !status.Running {
			b.Fatal(status, err)
		}
	}
}
