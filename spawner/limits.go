package spawner

import (
	"fmt"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// checkInputLimits refuses a start whose caller's input is beyond the
// bounds, before the profile is resolved from it.
func checkInputLimits(opts *StartOptions) error {
	if n := len(opts.UserOptions); n > kubespawner.MaxUserOptions {
		return &kubespawner.LimitError{Limit: "MaxUserOptions", Field: "the number of user options", Got: n, Max: kubespawner.MaxUserOptions}
	}
	for k, v := range opts.UserOptions {
		if len(k) > kubespawner.MaxUserOptionKeyBytes {
			return &kubespawner.LimitError{Limit: "MaxUserOptionKeyBytes", Field: fmt.Sprintf("the length of user option name %.40q...", k), Got: len(k), Max: kubespawner.MaxUserOptionKeyBytes}
		}
		if len(v) > kubespawner.MaxUserOptionValueBytes {
			return &kubespawner.LimitError{Limit: "MaxUserOptionValueBytes", Field: fmt.Sprintf("the length of user option %q", k), Got: len(v), Max: kubespawner.MaxUserOptionValueBytes}
		}
	}
	if n := len(opts.Env); n > kubespawner.MaxEnv {
		return &kubespawner.LimitError{Limit: "MaxEnv", Field: "the number of environment variables", Got: n, Max: kubespawner.MaxEnv}
	}
	for _, e := range opts.Env {
		if len(e.Value) > kubespawner.MaxEnvValueBytes {
			return &kubespawner.LimitError{Limit: "MaxEnvValueBytes", Field: fmt.Sprintf("the length of environment variable %.64q", e.Name), Got: len(e.Value), Max: kubespawner.MaxEnvValueBytes}
		}
	}
	return nil
}

// checkFinalMetadata validates the labels and annotations of every object
// a start creates as the API server's ValidateObjectMeta does (label
// keys and values; annotation keys and their 256 KiB total), on the
// final objects: what the configuration, the profile, the hub and
// spawnkit's own state record put there together. Without it input
// accepted by every earlier check could still fail at the pod's create,
// after the start was accepted.
func checkFinalMetadata(o *Objects) error {
	if o.Pod != nil {
		if n := len(o.Pod.Annotations[naming.AnnotationState]); n > kubespawner.MaxStateBytes {
			return &kubespawner.LimitError{Limit: "MaxStateBytes", Field: "the state record (" + naming.AnnotationState + ")", Got: n, Max: kubespawner.MaxStateBytes}
		}
	}
	type meta struct {
		kind        string
		labels, ann map[string]string
	}
	var objs []meta
	if o.Pod != nil {
		objs = append(objs, meta{"pod", o.Pod.Labels, o.Pod.Annotations})
	}
	if o.PVC != nil {
		objs = append(objs, meta{"claim", o.PVC.Labels, o.PVC.Annotations})
	}
	if o.Namespace != nil {
		objs = append(objs, meta{"namespace", o.Namespace.Labels, o.Namespace.Annotations})
	}
	if o.Service != nil {
		objs = append(objs, meta{"service", o.Service.Labels, o.Service.Annotations})
	}
	if o.Secret != nil {
		objs = append(objs, meta{"secret", o.Secret.Labels, o.Secret.Annotations})
	}
	if o.EnvSecret != nil {
		objs = append(objs, meta{"environment secret", o.EnvSecret.Labels, o.EnvSecret.Annotations})
	}
	var errs field.ErrorList
	for _, m := range objs {
		p := field.NewPath(m.kind, "metadata")
		errs = append(errs, metav1validation.ValidateLabels(m.labels, p.Child("labels"))...)
		errs = append(errs, apivalidation.ValidateAnnotations(m.ann, p.Child("annotations"))...)
	}
	if len(errs) > 0 {
		return &kubespawner.ConfigError{Errs: errs}
	}
	return nil
}
