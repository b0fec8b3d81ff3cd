package spawner

import (
	"fmt"

	"github.com/spawnkit/spawnkit/naming"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds on what a start takes from its caller. A start is planned
// (Plan, and the manager's Spawn before it accepts the start) against
// them, so input that could never make a valid pod, or that would make
// the server's state record (naming.AnnotationState, which holds every user
// option) too big for the pod, is refused before anything is created.
const (
	// MaxUserOptions is the most user options a start takes.
	MaxUserOptions = 64
	// MaxUserOptionKeyBytes and MaxUserOptionValueBytes bound one user
	// option (a profile slug, a choice, an unlisted value).
	MaxUserOptionKeyBytes   = 256
	MaxUserOptionValueBytes = 4096
	// MaxEnv is the most environment variables a start's caller gives
	// (StartOptions.Env); JupyterHub gives about twenty.
	MaxEnv = 512
	// MaxEnvValueBytes bounds one such value.
	MaxEnvValueBytes = 128 << 10
	// MaxStateBytes bounds the state record a pod carries.
	MaxStateBytes = 64 << 10
)

// LimitError is input beyond one of the bounds above, refused before the
// start creates anything.
type LimitError struct {
	// Limit names the bound (the constant's name), Field the input.
	Limit, Field string
	Got, Max     int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("spawner: %s is %d, over the limit of %d (%s)", e.Field, e.Got, e.Max, e.Limit)
}

// checkInputLimits refuses a start whose caller's input is beyond the
// bounds, before the profile is resolved from it.
func checkInputLimits(opts *StartOptions) error {
	if n := len(opts.UserOptions); n > MaxUserOptions {
		return &LimitError{Limit: "MaxUserOptions", Field: "the number of user options", Got: n, Max: MaxUserOptions}
	}
	for k, v := range opts.UserOptions {
		if len(k) > MaxUserOptionKeyBytes {
			return &LimitError{Limit: "MaxUserOptionKeyBytes", Field: fmt.Sprintf("the length of user option name %.40q...", k), Got: len(k), Max: MaxUserOptionKeyBytes}
		}
		if len(v) > MaxUserOptionValueBytes {
			return &LimitError{Limit: "MaxUserOptionValueBytes", Field: fmt.Sprintf("the length of user option %q", k), Got: len(v), Max: MaxUserOptionValueBytes}
		}
	}
	if n := len(opts.Env); n > MaxEnv {
		return &LimitError{Limit: "MaxEnv", Field: "the number of environment variables", Got: n, Max: MaxEnv}
	}
	for _, e := range opts.Env {
		if len(e.Value) > MaxEnvValueBytes {
			return &LimitError{Limit: "MaxEnvValueBytes", Field: fmt.Sprintf("the length of environment variable %.64q", e.Name), Got: len(e.Value), Max: MaxEnvValueBytes}
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
		if n := len(o.Pod.Annotations[naming.AnnotationState]); n > MaxStateBytes {
			return &LimitError{Limit: "MaxStateBytes", Field: "the state record (" + naming.AnnotationState + ")", Got: n, Max: MaxStateBytes}
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
		return &ConfigError{Errs: errs}
	}
	return nil
}
