package service

import (
	"os"
	"path/filepath"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/manifest"
)

// TestDeployNetworkPolicyIsTheBuilders: deploy/networkpolicy.yaml is
// what manifest.NetworkPolicy makes for z2jh's defaults in the hub's own
// namespace, so the shipped file and the policy spawnkit makes in user
// namespaces cannot drift apart. (TestDeploy applies the file.)
func TestDeployNetworkPolicyIsTheBuilders(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "networkpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict(data, &shipped); err != nil {
		t.Fatal(err)
	}
	built, err := manifest.NetworkPolicy(manifest.NetworkPolicySpec{
		Name:             "singleuser",
		ServerLabels:     map[string]string{"component": "singleuser-server"},
		HubLabels:        map[string]string{"app": "jupyterhub", "component": "hub"},
		ProxyLabels:      map[string]string{"app": "jupyterhub", "component": "proxy"},
		AutoHTTPSLabels:  map[string]string{"app": "jupyterhub", "component": "autohttps"},
		HubPort:          8081,
		EgressAllowRules: manifest.DefaultEgressAllowRules,
	})
	if err != nil {
		t.Fatal(err)
	}
	if shipped.Name != built.Name || !apiequality.Semantic.DeepEqual(shipped.Spec, built.Spec) {
		out, _ := yaml.Marshal(built.Spec)
		t.Errorf("deploy/networkpolicy.yaml's spec differs from manifest.NetworkPolicy's for z2jh's defaults:\n%s", out)
	}
}
