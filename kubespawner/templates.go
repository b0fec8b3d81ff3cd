package kubespawner

import (
	"encoding/json"
	"fmt"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/naming"
)

// literalValues is m with its templated values emptied: the keys of
// templated labels and annotations are not templates (KubeSpawner
// expands values only), and a value without a field renders as itself,
// so both can be checked before any server exists.
func literalValues(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !isTemplate(v) {
			out[k] = v
		} else {
			out[k] = ""
		}
	}
	return out
}

// isTemplate reports whether s holds a template field in either syntax,
// so it can only be checked once rendered.
func isTemplate(s string) bool { return strings.Contains(s, "{") }

func expandString(s string, fields naming.Fields, syntax naming.Syntax) (string, error) {
	v, err := naming.ParseValue(s, syntax)
	if err != nil {
		return "", err
	}
	out, err := v.Expand(fields)
	if err != nil {
		return "", err
	}
	return out.(string), nil
}

// Syntax is the syntax of the configuration's templates (template_syntax).
func (c *Config) Syntax() naming.Syntax {
	if c.TemplateSyntax == "go" {
		return naming.Go
	}
	return naming.KubeSpawner
}

// Expand renders s, a template in the configuration's syntax, with a
// server's fields.
func (c *Config) Expand(s string, fields naming.Fields) (string, error) {
	return expandString(s, fields, c.Syntax())
}

// NamingOptions maps the naming options onto naming.Options.
func (c Config) NamingOptions() (naming.Options, error) {
	o := naming.Options{
		Scheme:            c.SlugScheme,
		HubNamespace:      c.Namespace,
		UserNamespaces:    c.EnableUserNamespaces,
		PodTemplate:       c.PodNameTemplate,
		PVCTemplate:       c.PVCNameTemplate,
		SecretTemplate:    c.SecretNameTemplate,
		NamespaceTemplate: c.UserNamespaceTemplate,
		DNSTemplate:       c.DNSNameTemplate,
	}
	if c.SecretUsesPVCName() {
		o.SecretTemplate = "" // rendered by Plan (secretUsesPVCName)
	}
	switch c.TemplateSyntax {
	case "", "kubespawner":
		o.Syntax = naming.KubeSpawner
	case "go":
		o.Syntax = naming.Go
	default:
		return o, fmt.Errorf("kubespawner: template_syntax must be \"kubespawner\" or \"go\", not %q", c.TemplateSyntax)
	}
	return o, nil
}

// sampleFields are the template fields of a sample server, for checking
// templated labels and annotations before any real server exists: what a
// template adds for real servers is checked again when they start.
func sampleFields(c *Config) (naming.Fields, naming.Syntax, error) {
	syntax := naming.KubeSpawner
	if c.TemplateSyntax == "go" {
		syntax = naming.Go
	}
	ns := c.Namespace
	if ns == "" {
		ns = "default"
	}
	f, err := naming.NewFields(naming.Server{Username: "user", Servername: "server", UserID: 1}, c.SlugScheme, ns)
	f.PodName, f.PVCName = "jupyter-user--server", "claim-user--server"
	return f, syntax, err
}

// renderSample renders a templated string map with sample fields; a bad
// template is an error on key.
func renderSample(key string, m map[string]string, f naming.Fields, syntax naming.Syntax) (map[string]string, field.ErrorList) {
	if len(m) == 0 {
		return m, nil
	}
	v, err := naming.ParseValue(m, syntax)
	if err == nil {
		var out any
		if out, err = v.Expand(f); err == nil {
			return out.(map[string]string), nil
		}
	}
	return nil, field.ErrorList{field.Invalid(field.NewPath(key), "", err.Error())}
}

// checkTemplates parses every option KubeSpawner expands (_expand_all)
// that is not a string map checked by renderSample, so a template error
// or an unknown {field} fails at load, naming the option, not at a
// start.
func checkTemplates(c *Config, syntax naming.Syntax) field.ErrorList {
	var errs field.ErrorList
	var selector any
	if c.StorageSelector != nil {
		selector = c.StorageSelector
	}
	for _, t := range []struct {
		key string
		v   any
	}{
		{"volumes", c.Pod.Volumes}, {"volume_mounts", c.Pod.VolumeMounts}, {"pod_connect_ip", c.PodConnectIP},
		{"init_containers", c.Pod.InitContainers}, {"extra_containers", c.Pod.ExtraContainers},
		{"extra_pod_config", c.Pod.ExtraPodConfig}, {"service_account", c.Pod.ServiceAccount},
		{"working_dir", c.Pod.WorkingDir}, {"storage_selector", selector},
	} {
		raw, err := json.Marshal(t.v)
		if err != nil {
			continue
		}
		var generic any
		if json.Unmarshal(raw, &generic) != nil {
			continue
		}
		if _, err := naming.ParseValue(generic, syntax); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(t.key), "", err.Error()))
		}
	}
	return errs
}

// validateTemplated checks the templated labels, annotations and
// environment as far as they can be checked before a server exists.
func (c *Config) validateTemplated() field.ErrorList {
	var errs field.ErrorList
	// Templated values are checked rendered, by Plan (checkRendered):
	// here their keys, which are not templates, the values that are
	// literals, and the templates' syntax.
	if f, syntax, err := sampleFields(c); err == nil {
		_, lerrs := renderSample("extra_labels", c.ExtraLabels, f, syntax)
		errs = append(errs, lerrs...)
		errs = append(errs, metav1validation.ValidateLabels(literalValues(c.ExtraLabels), field.NewPath("extra_labels"))...)
		_, aerrs := renderSample("extra_annotations", c.ExtraAnnotations, f, syntax)
		errs = append(errs, aerrs...)
		errs = append(errs, apivalidation.ValidateAnnotations(literalValues(c.ExtraAnnotations), field.NewPath("extra_annotations"))...)
		_, nlerrs := renderSample("user_namespace_labels", c.UserNamespaceLabels, f, syntax)
		errs = append(errs, nlerrs...)
		_, naerrs := renderSample("user_namespace_annotations", c.UserNamespaceAnnotations, f, syntax)
		errs = append(errs, naerrs...)
		if c.EnableUserNamespaces {
			// The user namespace's (ValidateObjectMeta), when one is made.
			errs = append(errs, metav1validation.ValidateLabels(literalValues(c.UserNamespaceLabels), field.NewPath("user_namespace_labels"))...)
			errs = append(errs, apivalidation.ValidateAnnotations(literalValues(c.UserNamespaceAnnotations), field.NewPath("user_namespace_annotations"))...)
		}
		_, eerrs := renderSample("environment", c.Environment, f, syntax)
		errs = append(errs, eerrs...)
		for _, e := range c.EnvironmentEntries() {
			// The variable's name: a dict value's own name, else its key
			// (make_pod). The API server's check is ValidateEnv's
			// IsRelaxedEnvVarName (any printable ASCII but '='): the
			// only rule from Kubernetes 1.32 (RelaxedEnvironmentVariable
			// Validation, beta and on by default; GA in 1.34).
			name, p := e.Name, field.NewPath("environment").Key(e.Name)
			if m, ok := e.Value.(map[string]any); ok {
				if n, ok := m["name"].(string); ok && n != "" {
					name, p = n, p.Child("name")
				}
			}
			for _, msg := range validation.IsRelaxedEnvVarName(name) {
				errs = append(errs, field.Invalid(p, name, msg))
			}
		}
		_, slerrs := renderSample("storage_extra_labels", c.StorageExtraLabels, f, syntax)
		errs = append(errs, slerrs...)
		_, saerrs := renderSample("storage_extra_annotations", c.StorageExtraAnnotations, f, syntax)
		errs = append(errs, saerrs...)
		errs = append(errs, checkTemplates(c, syntax)...)
	}
	return errs
}
