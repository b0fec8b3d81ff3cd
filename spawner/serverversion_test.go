package spawner

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// The real API server under test (whichever supported minor SPAWNKIT_K8S
// selected) passes, and its version is the one discovery gives.
func TestCheckServerVersionRealServer(t *testing.T) {
	c := testcluster.Require(t, cluster)
	info, err := CheckServerVersion(t.Context(), c.Client)
	if err != nil {
		t.Fatalf("CheckServerVersion on %s: %v", c.ServerVersion.GitVersion, err)
	}
	if info.GitVersion != c.ServerVersion.GitVersion || info.GitVersion == "" {
		t.Errorf("CheckServerVersion = %q, discovery says %q", info.GitVersion, c.ServerVersion.GitVersion)
	}
}

// A server older than the minimum cannot be started here (none is built),
// so fake discovery stands in for it: the one thing this test needs is a
// /version answer.
func TestCheckServerVersionRefusesOld(t *testing.T) {
	for _, tc := range []struct {
		info  version.Info
		old   bool
		words []string
	}{
		{version.Info{Major: "1", Minor: "31", GitVersion: "v1.31.14"}, true, []string{"v1.31.14", "1.32 or newer"}},
		{version.Info{Major: "1", Minor: "28+", GitVersion: "v1.28.3-eks-4f4795d"}, true, []string{"v1.28.3-eks-4f4795d"}},
		{version.Info{GitVersion: "v1.24.17+k3s1"}, true, []string{"v1.24.17+k3s1"}},
		{version.Info{Major: "1", Minor: "32", GitVersion: "v1.32.0"}, false, nil},
		{version.Info{Major: "1", Minor: "33+", GitVersion: "v1.33.2-gke.100"}, false, nil},
		{version.Info{Major: "1", Minor: "40"}, false, nil},
		{version.Info{Major: "2", Minor: "0"}, false, nil},
		// Undated: accepted rather than refused.
		{version.Info{GitVersion: "v0.0.0-master+$Format:%H$"}, false, nil},
		{version.Info{}, false, nil},
	} {
		client := fake.NewClientset()
		client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &tc.info
		_, err := CheckServerVersion(t.Context(), client)
		if got := errors.Is(err, ErrServerTooOld); got != tc.old {
			t.Errorf("%+v: err = %v, want too old %v", tc.info, err, tc.old)
			continue
		}
		for _, w := range tc.words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q does not say %q", tc.info, err, w)
			}
		}
	}
}
