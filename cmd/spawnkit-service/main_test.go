package main

// The tests here are unit tests of the program's parts; the built binary
// is tested end to end in test/e2e/service. namespaceExists needs an API
// server with RBAC, hence the package's simulated cluster.

import (
	"testing"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// cluster is the package's simulated cluster; nil when it could not start
// outside CI (the tests that need it then skip).
var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1}, &cluster)
}
