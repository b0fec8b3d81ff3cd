package spawner

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
)

// A user namespace's NetworkPolicy and ResourceQuota written by a release
// before the single label domain (naming.LegacyLabelCluster) are moved to
// naming.LabelCluster by the next start, once: the legacy key is gone
// afterwards, the other labels are kept, and a second start updates
// nothing.
func TestNamespaceObjectsMoveLegacyClusterLabel(t *testing.T) {
	f, client := clusterFactory(t, "eu-1", mustLoad(t, everyObjectYAML))
	s, err := f.New(naming.Server{Username: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	o, err := s.Plan(ctx, everyObjectStart())
	if err != nil {
		t.Fatal(err)
	}
	legacy := map[string]string{naming.LabelManagedBy: naming.ManagedBySpawnkit, naming.LegacyLabelCluster: "eu-1", "kept": "yes"}
	policy := o.NetworkPolicy.DeepCopy()
	policy.Labels = legacy
	quota := o.ResourceQuota.DeepCopy()
	quota.Labels = legacy
	quota.Status.Hard = quota.Spec.Hard // synced: no wait for the quota controller
	if _, err := client.NetworkingV1().NetworkPolicies(policy.Namespace).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ResourceQuotas(quota.Namespace).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		client.ClearActions()
		if err := s.ensureNetworkPolicy(ctx, o.NetworkPolicy); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ensureQuota(ctx, o.ResourceQuota); err != nil {
			t.Fatal(err)
		}
		gotPolicy, err := client.NetworkingV1().NetworkPolicies(policy.Namespace).Get(ctx, policy.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gotQuota, err := client.CoreV1().ResourceQuotas(quota.Namespace).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for kind, labels := range map[string]map[string]string{"NetworkPolicy": gotPolicy.Labels, "ResourceQuota": gotQuota.Labels} {
			_, old := labels[naming.LegacyLabelCluster]
			if labels[naming.LabelCluster] != "eu-1" || old || labels["kept"] != "yes" {
				t.Errorf("round %d: %s labels %v, want %s=eu-1, no %s, the others kept", round, kind, labels, naming.LabelCluster, naming.LegacyLabelCluster)
			}
		}
		updates := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "update" {
				updates++
			}
		}
		if want := []int{2, 0}[round]; updates != want {
			t.Errorf("round %d: %d updates, want %d", round, updates, want)
		}
	}
}
