package kubespawner

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/naming"
)

// retiredTemplate reports whether a retired_namespaces entry is a
// template (rendered per server) rather than a namespace's name.
func retiredTemplate(entry string) bool { return strings.Contains(entry, "{") }

// retiredNamer renders a templated retired namespace for a server, as
// user_namespace_template would have: with the configuration's slug
// scheme, syntax and hub namespace.
func (c *Config) retiredNamer(tmpl string) (*naming.Namer, error) {
	o, err := c.NamingOptions()
	if err != nil {
		return nil, err
	}
	o.UserNamespaces, o.NamespaceTemplate = true, tmpl
	return naming.New(o)
}

// validateRetired checks retired_namespaces: each entry a namespace's
// name or a template that parses. An empty entry would widen the watch
// to every namespace, so it is refused.
func (c *Config) validateRetired() field.ErrorList {
	var errs field.ErrorList
	for i, ns := range c.RetiredNamespaces {
		path := field.NewPath("retired_namespaces").Index(i)
		switch {
		case ns == "":
			errs = append(errs, field.Required(path, "a namespace's name, or a template such as \"{hubnamespace}-{username}\""))
		case retiredTemplate(ns):
			if _, err := c.retiredNamer(ns); err != nil {
				errs = append(errs, field.Invalid(path, ns, fmt.Sprintf("not a namespace template: %v", err)))
			}
		default:
			for _, msg := range validation.IsDNS1123Label(ns) {
				errs = append(errs, field.Invalid(path, ns, msg))
			}
		}
	}
	return errs
}

// Retired splits retired_namespaces into the namespaces given by name and
// the namers of the templated entries, each rendering a server's retired
// namespace as user_namespace_template would have.
func (c *Config) Retired() (names []string, namers []*naming.Namer, err error) {
	for _, ns := range c.RetiredNamespaces {
		if !retiredTemplate(ns) {
			names = append(names, ns)
			continue
		}
		n, err := c.retiredNamer(ns)
		if err != nil {
			return nil, nil, fmt.Errorf("kubespawner: retired_namespaces %q: %w", ns, err)
		}
		namers = append(namers, n)
	}
	return names, namers, nil
}
