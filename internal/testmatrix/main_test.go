package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// read takes package results, skip reasons and the reported API server
// release from a `go test -json` stream; render marks a release that is
// not the row's.
func TestReadAndRender(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"github.com/spawnkit/spawnkit/spawner"}`,
		`{"Action":"output","Package":"github.com/spawnkit/spawnkit/spawner","Output":"testcluster: api server v1.32.13 ready at https://127.0.0.1:1 in 2s\n"}`,
		`{"Action":"run","Package":"github.com/spawnkit/spawnkit/spawner","Test":"TestA"}`,
		`{"Action":"output","Package":"github.com/spawnkit/spawnkit/spawner","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"github.com/spawnkit/spawnkit/spawner","Test":"TestA","Output":"    a_test.go:4: needs | a pipe\n"}`,
		`{"Action":"output","Package":"github.com/spawnkit/spawnkit/spawner","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}`,
		`{"Action":"skip","Package":"github.com/spawnkit/spawnkit/spawner","Test":"TestA"}`,
		`{"Action":"pass","Package":"github.com/spawnkit/spawnkit/spawner"}`,
		`not json`,
		`{"Action":"output","Package":"github.com/spawnkit/spawnkit/manager","Test":"TestB/sub","Output":"    b_test.go:9: the reason it failed\n"}`,
		`{"Action":"fail","Package":"github.com/spawnkit/spawnkit/manager","Test":"TestB/sub"}`,
		`{"Action":"fail","Package":"github.com/spawnkit/spawnkit/manager","Test":"TestB"}`,
		`{"Action":"fail","Package":"github.com/spawnkit/spawnkit/manager"}`,
		`{"Action":"skip","Package":"github.com/spawnkit/spawnkit/cmd/x"}`,
	}, "\n")
	var failOut strings.Builder
	r := result{v: testcluster.Versions{Minor: "1.32", Kubernetes: "v1.32.2"}, took: 90 * time.Second, failOut: &failOut}
	r.read(strings.NewReader(stream))
	// A failed test's output is shown, a passing or skipped one's not.
	if got := failOut.String(); !strings.Contains(got, "failed github.com/spawnkit/spawnkit/manager TestB:\n    b_test.go:9: the reason it failed") ||
		strings.Contains(got, "needs | a pipe") {
		t.Errorf("failed output:\n%s", got)
	}
	if r.passed != 1 || r.total != 2 || len(r.failed) != 1 || r.failed[0] != "manager" {
		t.Errorf("passed %d/%d, failed %v; want 1/2 and manager", r.passed, r.total, r.failed)
	}
	if len(r.skips) != 1 || r.skips[0].test != "spawner.TestA" || r.skips[0].reason != "a_test.go:4: needs | a pipe" {
		t.Errorf("skips %+v", r.skips)
	}
	if len(r.servers) != 1 || r.servers[0] != "v1.32.13" {
		t.Errorf("servers %v", r.servers)
	}
	table := render([]result{r}, time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
	for _, want := range []string{"2026-12-04", "| 1.32 | v1.32.13 (expected v1.32.2) | 1/2 | manager (TestB) |", `needs \| a pipe`, "1m30s"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
