package spawner

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

func TestPodDroppedLabelsAndAnnotations(t *testing.T) {
	sent := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Labels:      map[string]string{naming.LabelManagedBy: naming.ManagedBySpawnkit, "hub.jupyter.org/network-access-hub": "true"},
		Annotations: map[string]string{naming.AnnotationUsername: "alice"},
	}}
	got := sent.DeepCopy()
	got.Labels["added-by-webhook"] = "x"
	if d, err := podDropped(sent, got); err != nil || d != nil {
		t.Fatalf("podDropped = %q, %v; want none", d, err)
	}
	delete(got.Labels, "hub.jupyter.org/network-access-hub")
	got.Annotations = nil
	want := []string{"metadata.annotations." + naming.AnnotationUsername, "metadata.labels.hub.jupyter.org/network-access-hub"}
	if d, _ := podDropped(sent, got); !slices.Equal(d, want) {
		t.Errorf("podDropped = %q, want %q", d, want)
	}
}

func TestFieldsDroppedErrorNamesAll(t *testing.T) {
	e := &FieldsDroppedError{Namespace: "ns", Name: "jupyter-a", Fields: []string{"spec.hostUsers", "spec.resources"}, ServerVersion: "v1.32.13"}
	msg := e.Error()
	for _, want := range []string{"v1.32.13", "ns/jupyter-a", "spec.hostUsers, spec.resources", "feature gate"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}

// TestServerDropsFields starts servers with pod fields that some
// supported API servers drop, on whichever release the cluster runs
// (make test-matrix runs it on each): where the server keeps the field
// the server starts with it; where it drops it the start fails naming the
// field and the server's version, and leaves no pod behind.
//
//   - hostUsers (user namespaces): gate UserNamespacesSupport, off by
//     default until 1.33, so 1.32 clears it.
//   - hostnameOverride: unknown before 1.34, alpha (off) in 1.34, on from
//     1.35.
//   - schedulingGroup: gate GenericWorkload, off in every supported
//     release (alpha 1.35, beta off 1.37).
func TestServerDropsFields(t *testing.T) {
	c := testcluster.Require(t, cluster)
	minor, ok := leadingInt(c.ServerVersion.Minor)
	if !ok {
		t.Fatalf("cannot read the server's minor from %+v", c.ServerVersion)
	}
	cases := []struct {
		field, key, value string
		kept              bool
	}{
		{"spec.hostUsers", "hostUsers", `false`, minor >= 33},
		{"spec.hostnameOverride", "hostnameOverride", `"lab"`, minor >= 35},
		{"spec.schedulingGroup", "schedulingGroup", `{"podGroupName":"g"}`, false},
	}
	t.Run("allowed", func(t *testing.T) {
		// allowed_dropped_fields lets the start go on, and says so.
		t.Parallel()
		ns := newNamespace(t)
		cfg := baseConfig(ns)
		cfg.Pod.ExtraPodConfig = manifest.Overrides{{Key: "schedulingGroup", Value: json.RawMessage(`{"podGroupName":"g"}`)}}
		cfg.AllowedDroppedFields = []string{"spec.schedulingGroup"}
		s := newSpawner(t, naming.Server{Username: "dropped-allowed"}, cfg)
		stream := NewStream()
		opts := hubStart()
		opts.OnProgress = stream.Publish
		if _, err := s.Start(ctxTimeout(t, 60*time.Second), opts); err != nil {
			t.Fatalf("Start = %v; allowed_dropped_fields allows spec.schedulingGroup", err)
		}
		evs, _ := stream.Snapshot()
		if !slices.ContainsFunc(evs, func(e ProgressEvent) bool {
			return strings.Contains(e.Message, "without spec.schedulingGroup (allowed by allowed_dropped_fields)") &&
				strings.Contains(e.Message, c.ServerVersion.GitVersion)
		}) {
			t.Errorf("no progress message names the allowed drop: %+v", evs)
		}
	})
	for i, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			cfg := baseConfig(ns)
			cfg.Pod.ExtraPodConfig = manifest.Overrides{{Key: tc.key, Value: json.RawMessage(tc.value)}}
			s := newSpawner(t, naming.Server{Username: "dropped-" + string(rune('a'+i))}, cfg)
			ctx := ctxTimeout(t, 60*time.Second)
			_, err := s.Start(ctx, hubStart())
			t.Logf("%s on %s: %v", tc.field, c.ServerVersion.GitVersion, err)
			if tc.kept {
				if err != nil {
					t.Fatalf("Start = %v; the server keeps %s", err, tc.field)
				}
				return
			}
			var se *StartError
			var de *FieldsDroppedError
			if !errors.As(err, &se) || se.Step != StepPod || se.Reason != ReasonInvalid || !errors.As(err, &de) {
				t.Fatalf("Start = %v; want a StartError at pod, Invalid, with a FieldsDroppedError", err)
			}
			if !slices.Equal(de.Fields, []string{tc.field}) || de.ServerVersion != c.ServerVersion.GitVersion ||
				!strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %+v; want the field %s and version %s", de, tc.field, c.ServerVersion.GitVersion)
			}
			// The failed start deleted its pod (the namespace is this
			// test's alone).
			for {
				pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(pods.Items) == 0 {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the pod the server made without %s is still there: %s", tc.field, pods.Items[0].Name)
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
}
