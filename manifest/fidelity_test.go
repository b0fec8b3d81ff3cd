package manifest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// decodePod decodes make_pod arguments over basicSpec's name, image and
// port and builds the pod.
func decodePod(t *testing.T, kwargs string) (*corev1.Pod, error) {
	t.Helper()
	spec, err := DecodePodSpec([]byte(`{"name": "jupyter-alice", "image": "img", "port": 8888, ` + kwargs + `}`))
	if err != nil {
		return nil, err
	}
	return Pod(&spec)
}

// TestSecurityContextNull: make_pod's dict.update puts None where
// pod_security_context or container_security_context say null, which
// the API server reads as unset: what uid, gid or fs_gid set is removed,
// and the context is sent even when nothing else remains.
func TestSecurityContextNull(t *testing.T) {
	pod, err := decodePod(t, `"uid": 1000, "gid": 100, "fs_gid": 100, "supplemental_gids": [5],
		"container_security_context": {"runAsUser": null, "runAsNonRoot": true},
		"pod_security_context": {"fsGroup": null}`)
	if err != nil {
		t.Fatal(err)
	}
	csc := pod.Spec.Containers[0].SecurityContext
	if csc == nil || csc.RunAsUser != nil || csc.RunAsGroup == nil || *csc.RunAsGroup != 100 || csc.RunAsNonRoot == nil {
		t.Errorf("container securityContext %+v: want runAsUser removed, runAsGroup and runAsNonRoot kept", csc)
	}
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.FSGroup != nil || !slices.Equal(psc.SupplementalGroups, []int64{5}) {
		t.Errorf("pod securityContext %+v: want fsGroup removed, supplementalGroups kept", psc)
	}
	pod, err = decodePod(t, `"fs_gid": 100, "pod_security_context": {"fsGroup": null}, "allow_privilege_escalation": null`)
	if err != nil {
		t.Fatal(err)
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.FSGroup != nil {
		t.Errorf("pod securityContext %+v: want {} (KubeSpawner sends {fsGroup: null})", psc)
	}
	// Without a null, an empty context is left out, as `if not psc`.
	pod, err = decodePod(t, `"pod_security_context": {}, "allow_privilege_escalation": null`)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.SecurityContext != nil || pod.Spec.Containers[0].SecurityContext != nil {
		t.Errorf("security contexts %+v, %+v: want none", pod.Spec.SecurityContext, pod.Spec.Containers[0].SecurityContext)
	}
	// An id the context replaces is not checked; one that reaches the
	// pod is, as the API server does.
	if _, err := decodePod(t, `"uid": -1, "container_security_context": {"runAsUser": 1000}`); err != nil {
		t.Errorf("uid -1 replaced by runAsUser: %v", err)
	}
	for _, bad := range []string{`"uid": -1`, `"gid": 2147483648`, `"fs_gid": -5`, `"supplemental_gids": [-1]`} {
		if _, err := decodePod(t, bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestSupplementalGIDsInt: [int(gid) for gid in supplemental_gids].
func TestSupplementalGIDsInt(t *testing.T) {
	pod, err := decodePod(t, `"supplemental_gids": ["100", true, false, 7.9, -0.5, " 12\n", "+3", "1_000"]`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pod.Spec.SecurityContext.SupplementalGroups, []int64{100, 1, 0, 7, 0, 12, 3, 1000}; !slices.Equal(got, want) {
		t.Errorf("supplementalGroups %v, want %v", got, want)
	}
	for _, bad := range []string{`"7.9"`, `"1__0"`, `"_1"`, `"+-1"`, `""`, `null`, `[1]`, `{}`, `1e30`} {
		if _, err := DecodePodSpec([]byte(`{"supplemental_gids": [` + bad + `]}`)); err == nil || !strings.Contains(err.Error(), "supplemental_gids") {
			t.Errorf("supplemental_gids [%s]: err %v, want an error naming the option", bad, err)
		}
	}
}

// TestEnvSortedByDictKey: a dict entry keeps its own name; rounds are
// sorted by key; a later entry of the same name replaces an earlier one.
func TestEnvSortedByDictKey(t *testing.T) {
	pod, err := decodePod(t, `"env": {
		"zz": {"name": "AA", "value": "renamed"},
		"mm": "plain",
		"bb": "$(AA)-ref",
		"yy": {"name": "mm", "value": "replaced"}}`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range pod.Spec.Containers[0].Env {
		got = append(got, e.Name+"="+e.Value)
	}
	// Round 1 by key: yy (named mm, the later mm), zz (AA); round 2: bb.
	if want := []string{"mm=replaced", "AA=renamed", "bb=$(AA)-ref"}; !slices.Equal(got, want) {
		t.Errorf("env %v, want %v", got, want)
	}
}

// TestPVCSelectorAndAccessModes: make_pvc's `if selector:` leaves {} out;
// a claim without access modes, or ReadWriteOncePod with another, is
// refused as the API server refuses it.
func TestPVCSelectorAndAccessModes(t *testing.T) {
	for _, c := range []struct {
		sel  string
		want bool
	}{{`{}`, false}, {`null`, false}, {`{"matchLabels": {}}`, true}, {`{"matchLabels": {"a": "b"}}`, true}} {
		spec, err := DecodePVCSpec([]byte(`{"name": "claim-a", "storage": "1Gi", "access_modes": ["ReadWriteOnce"], "selector": ` + c.sel + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.Selector != nil; got != c.want {
			t.Errorf("selector %s: set=%v, want %v", c.sel, got, c.want)
		}
	}
	for _, modes := range []string{`[]`, `["ReadWriteOncePod", "ReadWriteOnce"]`} {
		spec, err := DecodePVCSpec([]byte(`{"name": "claim-a", "storage": "1Gi", "access_modes": ` + modes + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := PVC(spec); err == nil || !strings.Contains(err.Error(), "access_modes") {
			t.Errorf("access_modes %s: %v, want an error naming access_modes", modes, err)
		}
	}
}
