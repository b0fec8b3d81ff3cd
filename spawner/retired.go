package spawner

import (
	"strings"

	"github.com/spawnkit/spawnkit/naming"
)

// setRetired splits retired_namespaces into names and namers.
func (f *Factory) setRetired() (err error) {
	f.retired, f.retiredNamers, err = f.cfg.Retired()
	return err
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
