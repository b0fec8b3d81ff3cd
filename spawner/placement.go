package spawner

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
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
	if e.Pod != e.WantPod && slices.Contains(e.WantNamespaces, e.Namespace) {
		return fmt.Sprintf("spawner: pod %s/%s claims server %q of user %q, whose pod is named %q, and neither its own state record nor the hub's names it: not trusted",
			e.Namespace, e.Pod, e.Server.Servername, e.Server.Username, e.WantPod)
	}
	return fmt.Sprintf("spawner: pod %s/%s claims server %q of user %q, whose objects are only in namespace %s (a namespace that held servers before a configuration change belongs in retired_namespaces): not trusted",
		e.Namespace, e.Pod, e.Server.Servername, e.Server.Username, strings.Join(e.WantNamespaces, ", "))
}

// Namespaces are the namespaces this Factory's servers can be in: the
// configured namespace, every namespace a profile names and the retired
// ones (retired_namespaces). all is true with enable_user_namespaces,
// where each user has a namespace of their own (the profiles' come on
// top), and with a templated retired namespace. open, when not empty, names a profile
// option that lets the user type the namespace, which nothing can list
// in advance (the Manager refuses such a configuration).
func (f *Factory) Namespaces() (namespaces []string, all bool, open string) {
	namespaces = append(namespaces, f.cfg.Namespace)
	for _, ns := range slices.Concat(f.profileNS, f.retired) {
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	// A templated retired namespace is one per user: only a watch of
	// every namespace sees them all.
	return namespaces, f.watchAll, f.openNS
}

// CheckPlacement reports whether pod, found in the cluster carrying
// server's owner annotations, is that server's pod. Ownership is the
// place and the records together, never the annotations alone (anyone
// who can create a pod, anywhere, can write any annotations):
//
//   - the place: the pod's namespace is one this configuration trusts
//     for server: the server's namespace (the configured one, or the
//     user's own with enable_user_namespaces), one a profile names, or
//     one retired_namespaces names (rendered for server);
//   - the name: the one pod_name_template gives server today, or the one
//     the pod's own state record (naming.AnnotationState) gives it, when that
//     record names the pod's name and namespace and the start id the pod
//     carries (naming.AnnotationStartID), as every pod spawnkit makes does; or
//     the one hub, the State the hub saved for server, records (nil: no
//     such state).
//
// So a pod made under an earlier pod_name_template, namespace or user
// namespace template (listed as retired) stays its server's across the
// change. Anything else is a *PlacementError.
func (f *Factory) CheckPlacement(server naming.Server, pod *reflector.Pod, hub *State) error {
	names, err := f.namer.Names(server)
	if err != nil {
		return fmt.Errorf("spawner: pod %s/%s claims server %q of user %q, which this configuration cannot name: %w",
			pod.Namespace, pod.Name, server.Servername, server.Username, err)
	}
	want := f.trustedNamespaces(server, names.Namespace)
	switch {
	case !slices.Contains(want, pod.Namespace):
	case pod.Name == names.Pod:
		return nil
	case hub != nil && hub.PodName == pod.Name && hub.Namespace == pod.Namespace:
		return nil
	case recordsItself(pod):
		return nil
	}
	return &PlacementError{Server: server, Namespace: pod.Namespace, Pod: pod.Name, WantPod: names.Pod, WantNamespaces: want}
}

// recordsItself reports whether a pod's state record names the pod's
// own name and namespace and the start id the pod carries: what every
// pod a spawnkit start makes records. A pod whose record says it is
// somewhere else, or another start's, is not taken at its word.
func recordsItself(pod *reflector.Pod) bool {
	raw, ok := pod.Annotations.Lookup(naming.AnnotationState)
	if !ok {
		return false
	}
	var rec State
	if json.Unmarshal([]byte(raw), &rec) != nil {
		return false
	}
	return rec.PodName == pod.Name && rec.Namespace == pod.Namespace && rec.StartID != "" &&
		pod.Annotations.Get(naming.AnnotationStartID) == rec.StartID
}

// trustedNamespaces are the namespaces server's pod may be in: its own
// (own, as the namer renders it today), the profiles', and the retired
// ones, rendered for server, unless one is another user's own namespace
// today (anotherUsersOwn).
func (f *Factory) trustedNamespaces(server naming.Server, own string) []string {
	want := []string{own}
	add := func(ns string) {
		if ns != "" && !slices.Contains(want, ns) {
			want = append(want, ns)
		}
	}
	for _, ns := range f.profileNS {
		add(ns)
	}
	retired := func(ns string) {
		if !f.anotherUsersOwn(server, own, ns) {
			add(ns)
		}
	}
	for _, ns := range f.retired {
		retired(ns)
	}
	for _, n := range f.retiredNamers {
		if names, err := n.Names(server); err == nil {
			retired(names.Namespace)
		}
	}
	return want
}

// TrustsNamespace reports whether server's objects may be in namespace
// under this configuration (see CheckPlacement): a State naming another
// namespace is not the server's.
func (f *Factory) TrustsNamespace(server naming.Server, namespace string) bool {
	names, err := f.namer.Names(server)
	if err != nil {
		return false
	}
	return slices.Contains(f.trustedNamespaces(server, names.Namespace), namespace)
}

// checkProfileNamespace refuses a start whose profile (from
// ProfileListFunc) puts the server in a namespace ProfileNamespaces does
// not declare: its objects would be where nothing trusts or watches them.
func checkProfileNamespace(base *kubespawner.Config, ns, own string, server naming.Server) error {
	if base.ProfileListFunc == nil || ns == base.Namespace || ns == own || slices.Contains(base.ProfileNamespaces, ns) {
		return nil
	}
	return &kubespawner.ProfileError{Msg: fmt.Sprintf("the profile puts server %q of user %q in namespace %q, which Config.ProfileNamespaces does not declare (declared: %q)",
		server.Servername, server.Username, ns, base.ProfileNamespaces)}
}
