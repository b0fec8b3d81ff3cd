package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testcluster.LeakOptions()...) }

// TestQuickstart runs the quickstart end to end on its own simulated
// cluster, as `go run ./examples/quickstart` does.
func TestQuickstart(t *testing.T) {
	if os.Getenv("SPAWNKIT_TESTBIN") == "" && !testcluster.InCI() {
		t.Skip("SPAWNKIT_TESTBIN is not set; run through `make test`")
	}
	if err := run(t.Context(), "", "default", "quay.io/jupyter/base-notebook:2024-01-01"); err != nil {
		t.Fatal(err)
	}
}
