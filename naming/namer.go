package naming

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Default templates, in the KubeSpawner syntax (KubeSpawner 7.1's
// defaults) and the Go syntax (the same names).
const (
	DefaultPodTemplate       = "jupyter-{user_server}"
	DefaultPVCTemplate       = "claim-{user_server}"
	DefaultSecretTemplate    = "{pod_name}"
	DefaultNamespaceTemplate = "{hubnamespace}-{username}"
	DefaultDNSTemplate       = "{name}.{namespace}.svc.cluster.local"

	DefaultGoPodTemplate       = "jupyter-{{ .UserServer }}"
	DefaultGoPVCTemplate       = "claim-{{ .UserServer }}"
	DefaultGoSecretTemplate    = "{{ .PodName }}"
	DefaultGoNamespaceTemplate = "{{ .HubNamespace }}-{{ .Username }}"
	DefaultGoDNSTemplate       = "{{ .Name }}.{{ .Namespace }}.svc.cluster.local"
)

// Options configure a Namer. The zero value gives KubeSpawner 7.1's
// defaults.
type Options struct {
	// Scheme decides what username, servername and user_server mean.
	// Default: SchemeSafe.
	Scheme Scheme
	// Syntax is the syntax of the templates below. Default: KubeSpawner.
	Syntax Syntax
	// HubNamespace is the namespace the hub runs in, and the servers'
	// namespace unless UserNamespaces is set. Default: "default".
	HubNamespace string
	// UserNamespaces gives each user a namespace from NamespaceTemplate.
	UserNamespaces bool
	// Namespace is the configured namespace (KubeSpawner's namespace),
	// when it is not the hub's own: the servers' namespace unless
	// UserNamespaces is set, and {namespace} in templates, while
	// {hubnamespace} stays HubNamespace. Default: HubNamespace.
	Namespace string

	// PodTemplate names the pod. Default: "jupyter-{user_server}".
	PodTemplate string
	// PVCTemplate names the claim. Default: "claim-{user_server}".
	PVCTemplate string
	// SecretTemplate names the secret. Default: "{pod_name}".
	SecretTemplate string
	// NamespaceTemplate names a user's namespace when UserNamespaces is
	// set. Default: "{hubnamespace}-{username}". It cannot use pod_name or
	// pvc_name (they are computed after it); namespace there is
	// HubNamespace.
	NamespaceTemplate string
	// DNSTemplate makes the pod's DNS name from name (the pod name) and
	// namespace, and nothing else. Default:
	// "{name}.{namespace}.svc.cluster.local".
	DNSTemplate string
}

// Names are the rendered names of one server's objects.
type Names struct {
	Namespace string
	Pod       string
	DNS       string
	Secret    string
	PVC       string
	// LegacyPVC is PVCTemplate rendered with SchemeEscape: the claim name
	// an older KubeSpawner would have used, which a hub migrating from it
	// looks for before creating a new claim.
	LegacyPVC string
	// Fields are the template fields with PodName, PVCName and Namespace
	// filled in, for rendering the server's other templated options.
	Fields Fields

	// unchecked holds the errors of the secret, claim and DNS names
	// (in that order), which Names leaves to the caller: see Check.
	unchecked [3]*InvalidNameError
}

// Check returns the *InvalidNameError of the secret, claim or DNS name
// ("secret_name", "pvc_name", "dns_name") if the API server would reject
// it as an object's name, or nil. Names does not refuse these, because
// KubeSpawner renders them whether or not a server uses them: a claim
// name is refused only where a claim of that name is to be made, and so
// on. Check panics on any other field.
func (n Names) Check(field string) error {
	i := slices.Index(uncheckedFields, field)
	if i < 0 {
		panic("naming: Names.Check of " + field)
	}
	if e := n.unchecked[i]; e != nil {
		return e
	}
	return nil
}

// uncheckedFields are the names Check answers for, in unchecked's order.
var uncheckedFields = []string{"secret_name", "pvc_name", "dns_name"}

// Namer renders the object names of user servers. It is immutable and
// safe for concurrent use.
type Namer struct {
	opts                             Options
	pod, pvc, secret, namespace, dns *Template
}

// InvalidNameError reports a rendered name that the API server would
// reject.
type InvalidNameError struct {
	// Field is what the name is for: "pod_name", "namespace", ... or a
	// label key.
	Field    string
	Template string
	Value    string
	// Reasons are the API machinery's validation messages.
	Reasons []string
}

func (e *InvalidNameError) Error() string {
	tmpl := ""
	if e.Template != "" {
		tmpl = fmt.Sprintf(" from template %q", e.Template)
	}
	return fmt.Sprintf("naming: %s %q%s is invalid: %s", e.Field, e.Value, tmpl, strings.Join(e.Reasons, "; "))
}

// IsInvalidName reports whether err is or wraps an *InvalidNameError.
func IsInvalidName(err error) bool {
	var e *InvalidNameError
	return errors.As(err, &e)
}

// dnsKeys are the only fields of the DNS name template.
var dnsKeys = []fieldKey{{"name", "Name"}, {"namespace", "Namespace"}}

type dnsFields struct{ Name, Namespace string }

func (d dnsFields) field(key string) (string, bool) {
	switch key {
	case "name":
		return d.Name, true
	case "namespace":
		return d.Namespace, true
	}
	return "", false
}

// New parses and checks the templates. A template that uses a name not
// yet computed at its turn (KubeSpawner's order is namespace, pod, DNS,
// secret, PVC) is an error here, where KubeSpawner would render
// "pod_name_unavailable!".
func New(opts Options) (*Namer, error) {
	if opts.Scheme == "" {
		opts.Scheme = SchemeSafe
	}
	if opts.Scheme != SchemeSafe && opts.Scheme != SchemeEscape {
		return nil, fmt.Errorf("naming: slug scheme must be %q or %q, not %q", SchemeSafe, SchemeEscape, opts.Scheme)
	}
	if opts.HubNamespace == "" {
		opts.HubNamespace = "default"
	}
	if errs := validation.IsDNS1123Label(opts.HubNamespace); len(errs) > 0 {
		return nil, &InvalidNameError{Field: "hub namespace", Value: opts.HubNamespace, Reasons: errs}
	}
	defaults := [5]string{DefaultNamespaceTemplate, DefaultPodTemplate, DefaultSecretTemplate, DefaultPVCTemplate, DefaultDNSTemplate}
	if opts.Syntax == Go {
		defaults = [5]string{DefaultGoNamespaceTemplate, DefaultGoPodTemplate, DefaultGoSecretTemplate, DefaultGoPVCTemplate, DefaultGoDNSTemplate}
	}
	for i, p := range []*string{&opts.NamespaceTemplate, &opts.PodTemplate, &opts.SecretTemplate, &opts.PVCTemplate, &opts.DNSTemplate} {
		if *p == "" {
			*p = defaults[i]
		}
	}

	n := &Namer{opts: opts}
	var errs []error
	parseNamed := func(field, text string, keys []fieldKey, unavailable ...string) *Template {
		t, err := parseFor(text, opts.Syntax, keys)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s template: %w", field, err))
			return nil
		}
		for _, ref := range t.refs {
			if slices.Contains(unavailable, ref) {
				errs = append(errs, fmt.Errorf("naming: %s template %q uses %s, which is computed after the %s (order: namespace, pod_name, secret, pvc_name)", field, text, ref, field))
			}
		}
		return t
	}
	n.namespace = parseNamed("namespace", opts.NamespaceTemplate, fieldKeys, "pod_name", "pvc_name")
	n.pod = parseNamed("pod_name", opts.PodTemplate, fieldKeys, "pod_name", "pvc_name")
	if n.dns = parseNamed("dns_name", opts.DNSTemplate, dnsKeys); n.dns != nil {
		n.dns.keepDash = true
	}
	n.secret = parseNamed("secret_name", opts.SecretTemplate, fieldKeys, "pvc_name")
	n.pvc = parseNamed("pvc_name", opts.PVCTemplate, fieldKeys)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return n, nil
}

// Options returns the options with defaults filled in.
func (n *Namer) Options() Options { return n.opts }

// Names renders the names of s's objects and validates the ones every
// server uses, the pod name and (with user namespaces) the namespace:
// each invalid one is an *InvalidNameError naming the field, template and
// value (joined when both are invalid), and no names are returned then.
// The secret, claim and DNS names are validated too, but reported by
// Names.Check, for the caller to refuse where it uses them.
func (n *Namer) Names(s Server) (Names, error) {
	names, err := n.render(s)
	if err != nil {
		return Names{}, err
	}
	if err := n.validate(&names); err != nil {
		return Names{}, err
	}
	return names, nil
}

// render computes the names in KubeSpawner's order without validating
// them.
func (n *Namer) render(s Server) (Names, error) {
	f, err := NewFields(s, n.opts.Scheme, n.opts.HubNamespace)
	if err != nil {
		return Names{}, err
	}
	if n.opts.Namespace != "" {
		f.Namespace = n.opts.Namespace
	}
	var out Names
	if n.opts.UserNamespaces {
		if f.Namespace, err = n.namespace.execute(f); err != nil {
			return Names{}, err
		}
	}
	if f.PodName, err = n.pod.execute(f); err != nil {
		return Names{}, err
	}
	if out.DNS, err = n.dns.execute(dnsFields{Name: f.PodName, Namespace: f.Namespace}); err != nil {
		return Names{}, err
	}
	if out.Secret, err = n.secret.execute(f); err != nil {
		return Names{}, err
	}
	if f.PVCName, err = n.pvc.execute(f); err != nil {
		return Names{}, err
	}
	out.LegacyPVC = f.PVCName
	if n.opts.Scheme != SchemeEscape {
		// KubeSpawner renders the legacy name from fields in which only
		// the scheme differs; pod_name and namespace stay as computed.
		legacy, err := NewFields(s, SchemeEscape, n.opts.HubNamespace)
		if err != nil {
			return Names{}, err
		}
		legacy.PodName, legacy.Namespace = f.PodName, f.Namespace
		if n.opts.Namespace != "" {
			legacy.Namespace = f.Namespace
		}
		legacy.PVCName = f.PVCName
		if out.LegacyPVC, err = n.pvc.execute(legacy); err != nil {
			return Names{}, err
		}
	}
	out.Namespace, out.Pod, out.PVC, out.Fields = f.Namespace, f.PodName, f.PVCName, f
	return out, nil
}

func (n *Namer) validate(names *Names) error {
	for i, c := range []struct {
		template, value string
	}{{n.secret.text, names.Secret}, {n.pvc.text, names.PVC}, {n.dns.text, names.DNS}} {
		// An object's name (ValidateObjectMeta: a DNS-1123 subdomain for
		// secrets and claims); the DNS name is a host name.
		if reasons := isDNS1123Subdomain(c.value); len(reasons) > 0 {
			names.unchecked[i] = &InvalidNameError{Field: uncheckedFields[i], Template: c.template, Value: c.value, Reasons: reasons}
		}
	}
	checks := []struct {
		field, template, value string
		check                  func(string) []string
	}{
		// A pod name doubles as its hostname and, with internal SSL or
		// services, a service name: keep it a DNS label.
		{"pod_name", n.pod.text, names.Pod, isDNS1123Label},
	}
	if n.opts.UserNamespaces {
		checks = append(checks, struct {
			field, template, value string
			check                  func(string) []string
		}{"namespace", n.namespace.text, names.Namespace, isDNS1123Label})
	}
	var errs []error
	for _, c := range checks {
		if reasons := c.check(c.value); len(reasons) > 0 {
			errs = append(errs, &InvalidNameError{Field: c.field, Template: c.template, Value: c.value, Reasons: reasons})
		}
	}
	return errors.Join(errs...)
}

// Expand renders an arbitrary template (a volume path, an environment
// value) with a server's fields, as KubeSpawner's _expand_user_properties
// does; the result is not validated as a name.
func (n *Namer) Expand(t *Template, s Server) (string, error) {
	names, err := n.render(s)
	if err != nil {
		return "", err
	}
	return t.Execute(names.Fields)
}
