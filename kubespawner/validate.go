package kubespawner

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/naming"
)

// ConfigError reports every invalid option of a configuration at once,
// each by its KubeSpawner key (field.Error.Field: "port",
// "extra_labels[app]", "mem_limit"). It is returned before any object
// exists.
type ConfigError struct {
	Errs field.ErrorList
}

func (e *ConfigError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return "kubespawner: invalid configuration: " + strings.Join(msgs, "; ")
}

// Keys returns the keys of the invalid options, in the order found.
func (e *ConfigError) Keys() []string {
	keys := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		keys[i] = err.Field
	}
	return keys
}

// IsInvalidConfig reports whether err is or wraps a *ConfigError.
func IsInvalidConfig(err error) bool {
	var e *ConfigError
	return errors.As(err, &e)
}

// maxSeconds is the longest timeout a time.Duration can hold.
const maxSeconds = float64(math.MaxInt64) / 1e9

// checkSeconds checks a timeout: finite, within time.Duration, positive
// (or not negative when zero is allowed).
func checkSeconds(key string, v Seconds, allowZero bool) field.ErrorList {
	f := float64(v)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > maxSeconds:
		return field.ErrorList{field.Invalid(field.NewPath(key), f, "must be a finite number of seconds")}
	case f < 0 || f == 0 && !allowZero:
		want := "must be positive"
		if allowZero {
			want = "must not be negative"
		}
		return field.ErrorList{field.Invalid(field.NewPath(key), f, want)}
	}
	return nil
}

// checkName checks an optional object name with one of apimachinery's
// validators.
func checkName(key, name string, check func(string) []string) field.ErrorList {
	if name == "" {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range check(name) {
		errs = append(errs, field.Invalid(field.NewPath(key), name, msg))
	}
	return errs
}

// checkImage checks what the API server checks of an image reference
// (ValidatePodSpec's validateContainerCommon: set, no surrounding
// whitespace) and that it holds no whitespace or control characters
// inside, which the API server accepts but no registry can serve (the
// config vectors' rule image-never-pullable).
func checkImage(image string) field.ErrorList {
	p := field.NewPath("image")
	if image == "" {
		return field.ErrorList{field.Required(p, "the notebook image")}
	}
	if strings.IndexFunc(image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return field.ErrorList{field.Invalid(p, image, "must not contain whitespace or control characters")}
	}
	return nil
}

// validateOptions checks every option whose mistake would otherwise show
// only when a start talks to the API server, and returns all problems.
func (c *Config) validateOptions() field.ErrorList {
	var errs field.ErrorList
	for _, check := range []func() field.ErrorList{c.validateStart, c.validateNaming, c.validateTemplated, c.validateStorage, c.validatePod, c.validateOwn, c.validateProfiles} {
		errs = append(errs, check()...)
	}
	return errs
}

// validateStart checks the options a start reads as they are: the
// server's port and image, the timeouts, and the namespaces a Go-built
// profile list may use.
func (c *Config) validateStart() field.ErrorList {
	var errs field.ErrorList
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("port"), c.Port, "must be a port number (1-65535)"))
	}
	errs = append(errs, checkImage(c.Pod.Image)...)
	errs = append(errs, checkSeconds("start_timeout", c.StartTimeout, false)...)
	errs = append(errs, checkSeconds("k8s_api_request_timeout", c.K8sAPIRequestTimeout, false)...)
	errs = append(errs, checkSeconds("k8s_api_request_retry_timeout", c.K8sAPIRequestRetryTimeout, false)...)
	errs = append(errs, checkSeconds("stop_timeout", c.StopTimeout, true)...)
	errs = append(errs, checkSeconds("pending_timeout", c.PendingTimeout, true)...)
	errs = append(errs, checkSeconds("creating_timeout", c.CreatingTimeout, true)...)
	for i, ns := range c.ProfileNamespaces {
		// Watched and trusted: an empty or invalid name would widen the
		// watch (all namespaces) or stall the informer's sync.
		key := fmt.Sprintf("ProfileNamespaces[%d]", i)
		if ns == "" {
			errs = append(errs, field.Required(field.NewPath(key), "a namespace name (empty would mean every namespace)"))
		}
		errs = append(errs, checkName(key, ns, validation.IsDNS1123Label)...)
	}
	if c.UnschedulableTimeout != nil {
		errs = append(errs, checkSeconds("unschedulable_timeout", *c.UnschedulableTimeout, true)...)
	}
	if c.DeleteGracePeriod != nil {
		errs = append(errs, checkSeconds("delete_grace_period", *c.DeleteGracePeriod, true)...)
	}
	for _, t := range []struct {
		key string
		v   Seconds
	}{
		{"slow_spawn_message_after", c.SlowSpawnMessageAfter},
		{"slow_spawn_message_threshold", c.SlowSpawnMessageThreshold},
		{"slow_spawn_message_frequency", c.SlowSpawnMessageFrequency},
	} {
		if f := float64(t.v); math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > maxSeconds {
			errs = append(errs, field.Invalid(field.NewPath(t.key), f, "must be a finite number of seconds"))
		}
	}
	return errs
}

// validateNaming checks the names: slug scheme, templates, namespace,
// clusters, and the labels every object carries.
func (c *Config) validateNaming() field.ErrorList {
	var errs field.ErrorList
	switch c.SlugScheme {
	case "", naming.SchemeSafe, naming.SchemeEscape:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("slug_scheme"), c.SlugScheme, []naming.Scheme{naming.SchemeSafe, naming.SchemeEscape}))
	}
	if nopts, err := c.NamingOptions(); err != nil {
		errs = append(errs, field.NotSupported(field.NewPath("template_syntax"), c.TemplateSyntax, []string{"kubespawner", "go"}))
	} else if _, err := naming.New(nopts); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("naming"), "", err.Error()))
	}
	// ValidateNamespaceName (a DNS-1123 label).
	errs = append(errs, checkName("namespace", c.Namespace, validation.IsDNS1123Label)...)
	errs = append(errs, c.KubernetesCluster.check()...)
	// The pod's labels (ValidateObjectMeta: ValidateLabels).
	for _, msg := range validation.IsValidLabelValue(c.ComponentLabel) {
		errs = append(errs, field.Invalid(field.NewPath("component_label"), c.ComponentLabel, msg))
	}
	errs = append(errs, metav1validation.ValidateLabels(c.CommonLabels, field.NewPath("common_labels"))...)
	if c.StoragePVCEnsure {
		// The claim's (ValidateObjectMeta), when a claim is made.
		errs = append(errs, metav1validation.ValidateLabels(literalValues(c.StorageExtraLabels), field.NewPath("storage_extra_labels"))...)
		errs = append(errs, apivalidation.ValidateAnnotations(literalValues(c.StorageExtraAnnotations), field.NewPath("storage_extra_annotations"))...)
	}
	return errs
}

// validateOwn checks spawnkit's own options: fatal_reasons,
// allowed_dropped_fields, the user namespace's objects,
// retired_namespaces, event_message_rules and secret_env.
func (c *Config) validateOwn() field.ErrorList {
	var errs field.ErrorList
	for i, r := range c.FatalReasons {
		if r == "" {
			errs = append(errs, field.Required(field.NewPath("fatal_reasons").Index(i), "a container waiting reason"))
		}
	}
	for i, f := range c.AllowedDroppedFields {
		if f != "*" && !slices.ContainsFunc(droppedRoots, func(root string) bool { return DroppedAllowed(f, root) }) {
			errs = append(errs, field.Invalid(field.NewPath("allowed_dropped_fields").Index(i), f,
				`a path as a FieldsDroppedError names it, under spec, metadata.labels or metadata.annotations ("spec.hostUsers"), or "*"`))
		}
	}
	errs = append(errs, c.validateNamespaceObjects()...)
	errs = append(errs, c.validateRetired()...)
	for i := range c.EventMessageRules {
		r := c.EventMessageRules[i]
		path := field.NewPath("event_message_rules").Index(i)
		if r.Match != "" {
			if _, err := regexp.Compile(r.Match); err != nil {
				errs = append(errs, field.Invalid(path.Child("match"), r.Match, err.Error()))
				continue
			}
		}
		if r.Drop && r.Replace != "" {
			errs = append(errs, field.Invalid(path, r.Replace, "drop and replace exclude each other"))
		}
		if !r.Drop && r.Replace == "" {
			errs = append(errs, field.Required(path.Child("replace"), "a rule either drops the message or replaces it"))
		}
	}
	seen := map[string]bool{}
	for i, name := range c.SecretEnv {
		path := field.NewPath("secret_env").Index(i)
		// Each name is a key of the Secret: the API server's rule for
		// Secret keys (ValidateSecret: IsConfigMapKey).
		for _, msg := range validation.IsConfigMapKey(name) {
			errs = append(errs, field.Invalid(path, name, msg))
		}
		if seen[name] {
			errs = append(errs, field.Duplicate(path, name))
		}
		seen[name] = true
	}
	return errs
}

// validateProfiles checks the profile list, and that a Go-built Config
// with one can be made the options its profiles merge into.
func (c *Config) validateProfiles() field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, checkProfiles(c.ProfileList)...)
	if c.source == nil && (len(c.ProfileList) > 0 || c.ProfileListFunc != nil) {
		// A Go-built Config whose fields withDefaults could not make
		// the options profiles merge into: refuse it now, not at the
		// first start that resolves a profile.
		_, terrs := c.typedOptions()
		errs = append(errs, terrs...)
	}

	return errs
}

// Validate checks the options that would otherwise fail only at Start,
// after objects exist, and reports all problems at once by option name.
func (c *Config) Validate() error {
	if errs := c.validateOptions(); len(errs) > 0 {
		return &ConfigError{Errs: errs}
	}
	return nil
}
