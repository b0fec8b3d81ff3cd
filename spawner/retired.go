package spawner

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
	o, err := c.namingOptions()
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

// setRetired splits retired_namespaces into names and namers.
func (f *Factory) setRetired() error {
	for _, ns := range f.cfg.RetiredNamespaces {
		if !retiredTemplate(ns) {
			f.retired = append(f.retired, ns)
			continue
		}
		n, err := f.cfg.retiredNamer(ns)
		if err != nil {
			return fmt.Errorf("spawner: retired_namespaces %q: %w", ns, err)
		}
		f.retiredNamers = append(f.retiredNamers, n)
	}
	return nil
}

// userNamespaceSentinel is a user name every slug scheme keeps as it is,
// rendered through today's user_namespace_template to find where a user
// name sits in it (setRetired).
const userNamespaceSentinel = "spawnkitsentinel"

// setOwnNamespaceShape records the text around the user name in the
// namespace today's user_namespace_template gives a user; ownShapeKnown
// is false when the user name cannot be found in it (a hash, say).
func (f *Factory) setOwnNamespaceShape() {
	if !f.cfg.EnableUserNamespaces {
		return
	}
	names, err := f.namer.Names(naming.Server{Username: userNamespaceSentinel})
	if err != nil {
		return
	}
	i := strings.Index(names.Namespace, userNamespaceSentinel)
	if i < 0 || strings.Count(names.Namespace, userNamespaceSentinel) != 1 {
		return
	}
	f.ownPrefix, f.ownSuffix = names.Namespace[:i], names.Namespace[i+len(userNamespaceSentinel):]
	f.ownShapeKnown = true
}

// anotherUsersOwn reports whether ns, reached through retired_namespaces,
// may be the namespace today's user_namespace_template gives some user
// other than server's: that user's namespace is never another user's
// trusted place, whatever an old template rendered (an old
// "{hubnamespace}-{username}" gives user "user-x" the namespace that
// "{hubnamespace}-user-{username}" gives user "x" today). When the
// template's shape is unknown it cannot tell, and says yes.
func (f *Factory) anotherUsersOwn(server naming.Server, own, ns string) bool {
	if !f.cfg.EnableUserNamespaces || ns == own {
		return false
	}
	if !f.ownShapeKnown {
		return true
	}
	if len(ns) <= len(f.ownPrefix)+len(f.ownSuffix) || !strings.HasPrefix(ns, f.ownPrefix) || !strings.HasSuffix(ns, f.ownSuffix) {
		return false
	}
	other := naming.Server{Username: ns[len(f.ownPrefix) : len(ns)-len(f.ownSuffix)]}
	names, err := f.namer.Names(other)
	return err == nil && names.Namespace == ns
}
