package orphan

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/naming"
)

// listed is an object as listed in one cluster.
type listed struct {
	kind       Kind
	name, user string
	ownerPod   string // the UID of the pod owning it, if any
}

// placed is an orphan as judged in one cluster.
type placed struct {
	kind          Kind
	name          string
	reason        Reason
	serverCluster string
}

// judgeIn judges objs as List does when listing cluster (pods are named
// and given UIDs by their names).
func judgeIn(known *Known, cluster string, objs []listed) []Orphan {
	in := newInventory(known, AllKinds)
	in.cluster = cluster
	for _, o := range objs {
		m := metav1.ObjectMeta{Namespace: "jhub", Name: o.name, UID: types.UID(string(o.kind) + "/" + o.name),
			Annotations: map[string]string{naming.AnnotationUsername: o.user}}
		if o.kind == KindNamespace {
			m.Namespace = ""
		}
		if o.ownerPod != "" {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: o.ownerPod, UID: types.UID("Pod/" + o.ownerPod)}}
		}
		in.add(o.kind, m)
	}
	return in.orphans()
}

// A server is judged in the cluster being listed: what a move leaves in
// the old cluster is an orphan there and only there, a claim of a known
// user never is, an entry of unknown placement counts everywhere, and
// without Options.Cluster placements are not consulted.
func TestJudgeInCluster(t *testing.T) {
	known := NewKnown(4)
	known.AddIn("b", "bob", "", true)   // moved from a to b
	known.AddIn("", "carol", "", true)  // placement unknown (a split brain)
	known.Add("dave", "", true)         // Add: no placement
	known.AddIn("a", "erin", "", false) // stopped, in a
	moved := []listed{
		{KindPod, "jupyter-bob", "bob", ""},
		{KindSecret, "jupyter-bob", "bob", "jupyter-bob"},
		{KindService, "jupyter-bob", "bob", ""},
		{KindPVC, "claim-bob", "bob", ""},
	}
	everywhere := []listed{
		{KindPod, "jupyter-carol", "carol", ""},
		{KindSecret, "jupyter-carol", "carol", "jupyter-carol"},
		{KindPVC, "claim-carol", "carol", ""},
		{KindPod, "jupyter-dave", "dave", ""},
		{KindService, "jupyter-dave", "dave", ""},
	}
	for _, tc := range []struct {
		name    string
		cluster string
		objs    []listed
		want    []placed
	}{
		{"a moved server's pod, secret and service are orphans of the cluster it left", "a", moved, []placed{
			{KindPod, "jupyter-bob", ReasonOtherCluster, "b"},
			{KindSecret, "jupyter-bob", ReasonOtherCluster, "b"},
			{KindService, "jupyter-bob", ReasonOtherCluster, "b"},
		}},
		{"and not of the cluster it lives in", "b", moved, nil},
		{"a third cluster", "c", moved, []placed{
			{KindPod, "jupyter-bob", ReasonOtherCluster, "b"},
			{KindSecret, "jupyter-bob", ReasonOtherCluster, "b"},
			{KindService, "jupyter-bob", ReasonOtherCluster, "b"},
		}},
		{"unknown placement counts in a", "a", everywhere, nil},
		{"unknown placement counts in b", "b", everywhere, nil},
		{"a stopped server in its cluster", "a", []listed{{KindPod, "jupyter-erin", "erin", ""}}, []placed{
			{KindPod, "jupyter-erin", ReasonServerNotRunning, ""},
		}},
		{"a stopped server elsewhere", "b", []listed{{KindPod, "jupyter-erin", "erin", ""}}, []placed{
			{KindPod, "jupyter-erin", ReasonOtherCluster, "a"},
		}},
		{"an unknown server is unknown in every cluster", "b", []listed{{KindPod, "jupyter-zed", "zed", ""}}, []placed{
			{KindPod, "jupyter-zed", ReasonServerUnknown, ""},
		}},
		{"an unknown user's namespace without pods in this cluster", "a", []listed{{KindNamespace, "user-gina", "gina", ""}}, []placed{
			{KindNamespace, "user-gina", ReasonUserUnknown, ""},
		}},
		{"an unknown user's namespace with a pod in this cluster", "b", []listed{
			{KindNamespace, "jhub", "gina", ""}, {KindPod, "jupyter-gina", "gina", ""},
		}, []placed{
			{KindPod, "jupyter-gina", ReasonServerUnknown, ""},
		}},
		{"a known user's namespace in a cluster none of her servers is in", "a", []listed{{KindNamespace, "user-bob", "bob", ""}}, nil},
		{"without Options.Cluster placements are not consulted", "", moved, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orphans := judgeIn(known, tc.cluster, tc.objs)
			var got []placed
			for _, o := range orphans {
				got = append(got, placed{o.Kind, o.Name, o.Reason, o.ServerCluster})
				if o.Cluster != tc.cluster {
					t.Errorf("%s: Cluster %q, want %q (the cluster listed)", o, o.Cluster, tc.cluster)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("orphans %v, want %v", got, tc.want)
			}
		})
	}
}

// AddIn's last word on a server wins, for where it lives as for whether
// it runs; Add forgets the placement, as AddIn with "" does.
func TestKnownAddIn(t *testing.T) {
	k := NewKnown(0)
	k.AddIn("a", "alice", "", true)
	k.AddIn("b", "alice", "", false)
	if c, running := k.clusters[ServerKey{User: "alice"}], k.servers[ServerKey{User: "alice"}]; c != "b" || running {
		t.Errorf("alice in %q, running %v; want b, stopped", c, running)
	}
	k.Add("alice", "", true)
	if c, ok := k.clusters[ServerKey{User: "alice"}]; ok {
		t.Errorf("alice still placed in %q after Add", c)
	}
	k.AddIn("a", "alice", "gpu", true)
	k.AddIn("", "alice", "gpu", true)
	if c, ok := k.clusters[ServerKey{User: "alice", Server: "gpu"}]; ok {
		t.Errorf("alice/gpu still placed in %q after AddIn with no cluster", c)
	}
	if k.Len() != 2 || len(k.users) != 1 {
		t.Errorf("%d servers, %d users; want 2, 1", k.Len(), len(k.users))
	}
}

func TestOrphanStringNamesClusters(t *testing.T) {
	o := Orphan{Cluster: "a", Kind: KindPod, Namespace: "jhub", Name: "jupyter-bob", Server: ServerKey{User: "bob"},
		Attributed: true, Reason: ReasonOtherCluster, ServerCluster: "b"}
	if got, want := o.String(), "Pod jhub/jupyter-bob in cluster a (bob, other-cluster: lives in b)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	o.Cluster, o.ServerCluster, o.Reason = "", "", ReasonServerUnknown
	if got, want := o.String(), "Pod jhub/jupyter-bob (bob, server-unknown)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
