package orphan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/naming"
)

// sortVerdicts orders exactly as comparing kind, namespace and the whole
// name would, whatever the names' shared prefix and lengths (names that
// are prefixes of others, equal abbreviated keys, one name).
func TestSortVerdictsMatchesPlainComparison(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		prefix := strings.Repeat("jupyter-", rng.IntN(3))
		n := 1 + rng.IntN(60)
		if round%50 == 0 {
			n = 3*minPerPart + rng.IntN(100) // sorted in parts and merged
		}
		vs := make([]verdict, n)
		for i := range vs {
			b := make([]byte, rng.IntN(14))
			for j := range b {
				b[j] = "ab-0z"[rng.IntN(5)]
			}
			vs[i] = verdict{namespace: []string{"a", "b"}[rng.IntN(2)], name: prefix + string(b), kind: uint8(rng.IntN(2)), obj: int32(i)}
		}
		want := slices.Clone(vs)
		slices.SortStableFunc(want, func(a, b verdict) int {
			if a.kind != b.kind {
				return int(a.kind) - int(b.kind)
			}
			if c := strings.Compare(a.namespace, b.namespace); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
		got := sortVerdicts(vs)
		if len(got) != len(want) {
			t.Fatalf("round %d: %d verdicts, want %d", round, len(got), len(want))
		}
		for i, g := range got {
			if g.kind != want[i].kind || g.namespace != want[i].namespace || g.name != want[i].name {
				t.Fatalf("round %d: at %d got %d/%s/%q, want %d/%s/%q", round, i,
					g.kind, g.namespace, g.name, want[i].kind, want[i].namespace, want[i].name)
			}
		}
	}
}

// The last Add of a server says whether it runs; a user with two
// servers is one user.
func TestKnownAdd(t *testing.T) {
	k := NewKnown(0)
	k.Add("alice", "", true)
	k.Add("alice", "", false) // the last word wins
	k.Add("alice", "gpu", true)
	if running, ok := k.servers[ServerKey{User: "alice"}]; !ok || running {
		t.Errorf("alice's default server: known %v, running %v; want known, stopped", ok, running)
	}
	if running, ok := k.servers[ServerKey{User: "alice", Server: "gpu"}]; !ok || !running {
		t.Errorf("alice/gpu: known %v, running %v; want known, running", ok, running)
	}
	if _, ok := k.users["alice"]; !ok || len(k.users) != 1 || k.Len() != 2 {
		t.Errorf("users %v, %d servers; want alice, 2", k.users, k.Len())
	}
}

// Orphans come sorted by kind in alphabetical order (Namespace,
// PersistentVolumeClaim, Pod, Secret, Service), then namespace and name.
func TestOrphansSortedByKindName(t *testing.T) {
	in := newInventory(NewKnown(0), AllKinds)
	for _, o := range []struct {
		k    Kind
		name string
	}{{KindService, "a"}, {KindPod, "b"}, {KindSecret, "a"}, {KindNamespace, "b"}, {KindPVC, "a"}, {KindPod, "a"}} {
		k, name := o.k, o.name
		in.add(k, metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(fmt.Sprint(len(in.objects))),
			Annotations: map[string]string{naming.AnnotationUsername: "nobody-knows"}})
	}
	var got []string
	for _, o := range in.orphans() {
		got = append(got, string(o.Kind)+"/"+o.Name)
	}
	want := []string{"Namespace/b", "PersistentVolumeClaim/a", "Pod/a", "Pod/b", "Secret/a", "Service/a"}
	if !slices.Equal(got, want) {
		t.Errorf("orphans in order %v, want %v", got, want)
	}
}
