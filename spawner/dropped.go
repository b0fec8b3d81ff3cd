package spawner

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/internal/dropped"
	"github.com/spawnkit/spawnkit/kubespawner"
)

// FieldsDroppedError is a start's error when the API server made the pod
// without fields spawnkit sent: a field its version does not know (the
// decoder drops it), a field whose feature gate is off (the API server
// clears it before validation, without a warning) or one an admission
// webhook removed. Running that pod would run a server other than the one
// configured (without hostUsers: false, without pod-level resources), so
// the start fails and the pod is deleted, as after any failed start,
// unless allowed_dropped_fields allows the fields.
type FieldsDroppedError struct {
	Namespace, Name string
	// Fields are what spawnkit sent that the created pod lacks: fields of
	// its spec in their JSON spelling ("spec.hostUsers",
	// "spec.containers[notebook].resizePolicy"; a list of named entries
	// is indexed by name, any other list by position), and label or
	// annotation keys ("metadata.labels.hub.jupyter.org/network-access-hub").
	Fields []string
	// ServerVersion is the API server's version (its /version), or ""
	// when it could not be read.
	ServerVersion string
}

func (e *FieldsDroppedError) Error() string {
	server := "the API server"
	if e.ServerVersion != "" {
		server += " (" + e.ServerVersion + ")"
	}
	return fmt.Sprintf("%s made pod %s/%s without %s: its version does not know the field, "+
		"the feature gate the field needs is off, or an admission webhook removed it; "+
		"remove it from the configuration, run a server that keeps it, or allow it in allowed_dropped_fields",
		server, e.Namespace, e.Name, strings.Join(e.Fields, ", "))
}

// checkKept returns a *FieldsDroppedError when created lacks a field of
// sent's spec, or a label or annotation key, that allowed
// (allowed_dropped_fields) does not cover; the allowed ones it reports in
// the start's progress. Fields are compared by presence (see
// dropped.Fields): the API server may normalise a value ("1000m" CPU read
// back as "1") or add fields (defaults, admission plugins), and neither
// is a loss.
func (s *Spawner) checkKept(ctx context.Context, sent, created *corev1.Pod, allowed []string, em *emitter) error {
	dropped, err := podDropped(sent, created)
	if err != nil {
		return fmt.Errorf("comparing pod %s/%s with the pod sent: %w", created.Namespace, created.Name, err)
	}
	if len(dropped) == 0 {
		return nil
	}
	var refused, let []string
	for _, f := range dropped {
		if slices.ContainsFunc(allowed, func(a string) bool { return kubespawner.DroppedAllowed(f, a) }) {
			let = append(let, f)
		} else {
			refused = append(refused, f)
		}
	}
	// Read only on this rare path: the version helps the operator, and a
	// failure to read it must not hide what was dropped.
	version := ""
	if info, err := serverVersion(ctx, s.b.client); err == nil {
		version = describeVersion(info)
	}
	if len(let) > 0 {
		server := "The API server"
		if version != "" {
			server += " (" + version + ")"
		}
		em.note(-1, fmt.Sprintf("%s made pod %s/%s without %s (allowed by allowed_dropped_fields)",
			server, created.Namespace, created.Name, strings.Join(let, ", ")))
	}
	if len(refused) == 0 {
		return nil
	}
	return &FieldsDroppedError{Namespace: created.Namespace, Name: created.Name, Fields: refused, ServerVersion: version}
}

// podDropped lists what created lacks of sent: fields of the spec, and
// label and annotation keys (spawnkit's own say whose server the pod is).
func podDropped(sent, created *corev1.Pod) ([]string, error) {
	dropped, err := dropped.Fields(&sent.Spec, &created.Spec, "spec")
	if err != nil {
		return nil, err
	}
	for _, m := range []struct {
		path string
		a, b map[string]string
	}{{"metadata.labels", sent.Labels, created.Labels}, {"metadata.annotations", sent.Annotations, created.Annotations}} {
		for k := range m.a {
			if _, ok := m.b[k]; !ok {
				dropped = append(dropped, m.path+"."+k)
			}
		}
	}
	slices.Sort(dropped)
	return dropped, nil
}
