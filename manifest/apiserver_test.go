package manifest

import (
	"encoding/json"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.APIServer}, &cluster)
}

// TestAPIServerAcceptsVectors sends every object built from the reference
// vectors to a real kube-apiserver (server-side dry run, strict field
// validation): the builders produce objects the API accepts as they are.
func TestAPIServerAcceptsVectors(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "manifest-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The Priority admission plugin needs the class a vector names.
	_, err = c.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "jupyterhub-user"}, Value: 0,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	data, err := os.ReadFile("testdata/manifest-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Cases []vectorCase }
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict}
	sent := 0
	for _, vc := range file.Cases {
		obj, err := buildVector(vc)
		if err != nil {
			continue // error cases are checked in TestVectors
		}
		switch o := obj.(type) {
		case *corev1.Pod:
			_, err = c.Client.CoreV1().Pods(ns.Name).Create(ctx, o, dry)
		case *corev1.PersistentVolumeClaim:
			_, err = c.Client.CoreV1().PersistentVolumeClaims(ns.Name).Create(ctx, o, dry)
		case *corev1.Secret:
			_, err = c.Client.CoreV1().Secrets(ns.Name).Create(ctx, o, dry)
		case *corev1.Service:
			_, err = c.Client.CoreV1().Services(ns.Name).Create(ctx, o, dry)
		case *corev1.Namespace:
			_, err = c.Client.CoreV1().Namespaces().Create(ctx, o, dry)
		default:
			continue // an owner reference is not an object of its own
		}
		if err != nil {
			t.Errorf("%s: the API server rejects the built object: %v", vc.Name, err)
		}
		sent++
	}
	if sent < 20 {
		t.Errorf("sent only %d objects", sent)
	}
	t.Logf("the API server accepted %d built objects", sent)
}
