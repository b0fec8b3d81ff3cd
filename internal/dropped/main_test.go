package dropped

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The API server dropped a field it does not know: Fields names it.
func ExampleFields() {
	sent := &corev1.PodSpec{HostUsers: new(bool), Containers: []corev1.Container{{Name: "notebook"}}}
	got := &corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook"}}}
	paths, err := Fields(sent, got, "spec")
	fmt.Println(paths, err)
	// Output: [spec.hostUsers] <nil>
}
