package spawner

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// warnings collects the API server's warnings.
type warnings struct {
	mu   sync.Mutex // guards msgs
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// TestKubeSpawnerObjectsAPIServer sends the objects the real KubeSpawner
// made for each config vector, byte for byte, to the API server
// (server-side dry run). It is the proof behind the rules that excuse a
// case because of the API server: under api-rejects the API server
// refuses an object, under pod-name-dns-label it accepts the pod only
// with a warning about its hostname.
func TestKubeSpawnerObjectsAPIServer(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	warn := &warnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = warn
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	var file struct{ Cases []configCase }
	for _, path := range []string{"testdata/config-vectors.json", "testdata/config-vectors-random.json"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Cases []configCase }
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		file.Cases = append(file.Cases, f.Cases...)
	}
	// The Priority admission plugin needs the classes the vectors name,
	// or it refuses a pod before validation looks at it.
	classes := map[string]bool{"user-prio": true}
	for _, vc := range file.Cases {
		if vc.Expected != nil && len(vc.Expected.Pod) > 0 {
			var pod struct {
				Spec struct {
					PriorityClassName string `json:"priorityClassName"`
				} `json:"spec"`
			}
			if json.Unmarshal(vc.Expected.Pod, &pod) == nil && pod.Spec.PriorityClassName != "" {
				classes[pod.Spec.PriorityClassName] = true
			}
		}
	}
	for _, pc := range slices.Sorted(maps.Keys(classes)) {
		_, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pc}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	checked := map[string]int{}
	for _, vc := range file.Cases {
		if vc.Expected == nil {
			continue
		}
		in := &caseInput{config: orderedMap(t, vc.Config), c: &vc}
		var rules []string
		for _, r := range kubespawnerRules {
			if r.applies != nil && r.applies(in) {
				rules = append(rules, r.name)
			}
		}
		rejects, warns := slices.Contains(rules, "api-rejects"), slices.Contains(rules, "pod-name-dns-label")
		if !rejects && !warns {
			continue
		}
		t.Run(vc.Name, func(t *testing.T) {
			var refused []string
			var warned []string
			for _, o := range []struct {
				resource string
				raw      json.RawMessage
			}{{"pods", vc.Expected.Pod}, {"persistentvolumeclaims", vc.Expected.PVC}, {"services", vc.Expected.Service}, {"namespaces", vc.Expected.NamespaceManifest}} {
				if len(o.raw) == 0 || string(o.raw) == "null" {
					continue
				}
				req := client.CoreV1().RESTClient().Post().Resource(o.resource)
				if o.resource != "namespaces" {
					req = req.Namespace(ns)
				}
				err := req.Param("dryRun", "All").Param("fieldValidation", "Strict").
					Body([]byte(o.raw)).Do(ctx).Error()
				switch {
				case apierrors.IsInvalid(err):
					refused = append(refused, o.resource+": "+err.Error())
				case err != nil:
					t.Fatalf("%s: %v", o.resource, err)
				}
				warned = append(warned, warn.take()...)
			}
			switch {
			case rejects && len(refused) == 0:
				t.Errorf("rule api-rejects: the API server accepted all of KubeSpawner's objects")
			case warns && !slices.ContainsFunc(warned, func(w string) bool { return strings.Contains(w, "hostname") }):
				t.Errorf("rule pod-name-dns-label: no hostname warning (warnings: %q, refusals: %q)", warned, refused)
			}
			t.Logf("refused: %q; warnings: %q", refused, warned)
		})
		for _, r := range rules {
			checked[r]++
		}
	}
	if checked["api-rejects"] == 0 || checked["pod-name-dns-label"] == 0 {
		t.Errorf("no case exercised the rules: %v", checked)
	}
	t.Logf("dry runs by rule: %v", checked)
}
