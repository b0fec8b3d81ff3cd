package spawner

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spawnkit/spawnkit/naming"
)

// PlacementError is a pod found in the cluster that claims a server (its
// owner annotations name it) but is not where this configuration puts
// that server's pod: another namespace, or another name. Whoever can
// create pods there is not trusted with the server's routing, so such a
// pod is never adopted, recovered or returned as the server.
type PlacementError struct {
	Server         naming.Server
	Namespace, Pod string // where the pod is
	// WantPod is the server's pod name, WantNamespaces the namespaces
	// its configuration and profiles can put it in.
	WantPod        string
	WantNamespaces []string
}

func (e *PlacementError) Error() string {
	if e.Pod != e.WantPod {
		return fmt.Sprintf("spawner: pod %s/%s claims server %q of user %q, whose pod is named %q: not trusted",
			e.Namespace, e.Pod, e.Server.Servername, e.Server.Username, e.WantPod)
	}
	return fmt.Sprintf("spawner: pod %s/%s claims server %q of user %q, whose objects are only in namespace %s: not trusted",
		e.Namespace, e.Pod, e.Server.Servername, e.Server.Username, strings.Join(e.WantNamespaces, ", "))
}

// profileNamespaces are the namespaces a profile override can put a
// server in (kubespawner_override "namespace", a literal in KubeSpawner,
// never expanded), from the static profile list or, with
// ProfileListFunc, as ProfileNamespaces declares them. open names the
// first unlisted choice whose override makes the namespace the user's
// typed value: no list can hold those.
func (c *Config) profileNamespaces() (namespaces []string, open string) {
	if c.ProfileListFunc != nil {
		return slices.Clone(c.ProfileNamespaces), ""
	}
	add := func(o map[string]any) {
		// A name no namespace can have is refused when the profile is
		// chosen (its objects cannot be made); it is never watched.
		if ns, ok := o["namespace"].(string); ok && len(validation.IsDNS1123Label(ns)) == 0 && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	for _, p := range c.ProfileList {
		add(p.KubeSpawnerOverride)
		for _, opt := range p.ProfileOptions {
			for _, ch := range opt.Choices {
				add(ch.KubeSpawnerOverride)
			}
			if u := opt.UnlistedChoice; u != nil && u.Enabled {
				if ns, ok := u.KubeSpawnerOverride["namespace"].(string); ok && strings.Contains(ns, "{value}") {
					if open == "" {
						open = fmt.Sprintf("profile %q, option %q", p.Slug, opt.Name)
					}
					continue
				}
				add(u.KubeSpawnerOverride)
			}
		}
	}
	return namespaces, open
}

// Namespaces are the namespaces this Factory's servers can be in: the
// configured namespace and every namespace a profile names. all is true
// with enable_user_namespaces, where each user has a namespace of their
// own (the profiles' come on top). open, when not empty, names a profile
// option that lets the user type the namespace, which nothing can list
// in advance (the Manager refuses such a configuration).
func (f *Factory) Namespaces() (namespaces []string, all bool, open string) {
	namespaces = append(namespaces, f.cfg.Namespace)
	for _, ns := range f.profileNS {
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	return namespaces, f.cfg.EnableUserNamespaces, f.openNS
}

// CheckPlacement reports whether a pod named pod in namespace, found in
// the cluster carrying server's owner annotations, is where this
// configuration puts server's pod: its name is the one pod_name_template
// gives the server, and its namespace is the server's (the configured
// one, or the user's own with enable_user_namespaces) or one a profile
// names. Anything else is a *PlacementError. Ownership is thus (namespace,
// user, server), never the annotations alone: annotations can be written
// by anyone who can create a pod, anywhere.
func (f *Factory) CheckPlacement(server naming.Server, namespace, pod string) error {
	names, err := f.namer.Names(server)
	if err != nil {
		return fmt.Errorf("spawner: pod %s/%s claims server %q of user %q, which this configuration cannot name: %w",
			namespace, pod, server.Servername, server.Username, err)
	}
	want := []string{names.Namespace}
	for _, ns := range f.profileNS {
		if !slices.Contains(want, ns) {
			want = append(want, ns)
		}
	}
	if pod != names.Pod || !slices.Contains(want, namespace) {
		return &PlacementError{Server: server, Namespace: namespace, Pod: pod, WantPod: names.Pod, WantNamespaces: want}
	}
	return nil
}

// checkProfileNamespace refuses a start whose profile (from
// ProfileListFunc) puts the server in a namespace ProfileNamespaces does
// not declare: its objects would be where nothing trusts or watches them.
func checkProfileNamespace(base *Config, ns, own string, server naming.Server) error {
	if base.ProfileListFunc == nil || ns == base.Namespace || ns == own || slices.Contains(base.ProfileNamespaces, ns) {
		return nil
	}
	return &ProfileError{Msg: fmt.Sprintf("the profile puts server %q of user %q in namespace %q, which Config.ProfileNamespaces does not declare (declared: %q)",
		server.Servername, server.Username, ns, base.ProfileNamespaces)}
}
