package spawner

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// moveToSecret turns each variable of env named in names that has a
// value into a reference to that key of the Secret secret, and returns
// the values it took (nil when none): the Secret's data.
func moveToSecret(env []corev1.EnvVar, names []string, secret string) map[string]string {
	var data map[string]string
	for i := range env {
		e := &env[i]
		if e.ValueFrom != nil || e.Value == "" || !slices.Contains(names, e.Name) {
			continue
		}
		if data == nil {
			data = make(map[string]string, len(names))
		}
		data[e.Name] = e.Value
		e.Value = ""
		e.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: e.Name}}
	}
	return data
}

// EnvSecretName is the name of the environment Secret of the pod named
// pod: the pod's name and ".env". A pod name has no dot under the
// default templates, so it never collides with another server's
// internal-SSL Secret (named as the pod).
func EnvSecretName(pod string) string { return pod + ".env" }
