package naming

import (
	"fmt"
	"strconv"
)

// Scheme is how user and server names become parts of object names.
type Scheme string

const (
	// SchemeSafe keeps names that are already valid object names and
	// hashes the rest (SafeSlug). KubeSpawner's default since 7.0: names
	// are readable, always valid and never collide.
	SchemeSafe Scheme = "safe"
	// SchemeEscape escapes every character outside [a-z0-9] (EscapeSlug).
	// KubeSpawner's scheme before 7.0: pick it only to keep the names of
	// objects an older KubeSpawner created. Long or unusual names can
	// produce invalid object names, which Namer reports as errors.
	SchemeEscape Scheme = "escape"
)

// Server identifies one user server.
type Server struct {
	// Username is the hub's user name, as is.
	Username string
	// Servername is the named server's name; "" is the default server.
	Servername string
	// UserID is the hub's numeric user id ({userid}).
	UserID int64
}

// Fields are the values a template can use, with KubeSpawner 7.1's
// meaning. In the KubeSpawner syntax each is written as its snake_case key
// ({user_server}); in the Go syntax as the Go field (.UserServer).
type Fields struct {
	UserID              int64  // userid: the hub's user id
	UnescapedUsername   string // unescaped_username: the raw user name
	UnescapedServername string // unescaped_servername: the raw server name
	// HubNamespace (hubnamespace) is the hub's namespace, or "user" when
	// that is "default".
	HubNamespace string

	// Username, Servername and UserServer are the safe or escaped values,
	// as the scheme decides.
	Username   string // username
	Servername string // servername
	UserServer string // user_server: "{username}--{servername}", or username for the default server

	SafeUsername   string // safe_username: SafeSlug(username, 48)
	SafeServername string // safe_servername: SafeSlug(servername, 48), "" for the default server
	// SafeUserServer (safe_user_server) joins the two with "--", or is
	// MultiSlug([username, servername], 48) when that would exceed 48.
	SafeUserServer string

	EscapedUsername   string // escaped_username: EscapeSlug(username)
	EscapedServername string // escaped_servername: EscapeSlug(servername)
	// EscapedUserServer (escaped_user_server) is always
	// "{escaped_username}--{escaped_servername}", ending in "--" for the
	// default server (KubeSpawner's trailing-'-' strip then removes it).
	EscapedUserServer string

	// PodName, PVCName and Namespace are the rendered names, filled in by
	// Namer in KubeSpawner's order: namespace, pod, DNS, secret, PVC.
	PodName   string // pod_name
	PVCName   string // pvc_name
	Namespace string // namespace
}

// fieldKey pairs a field's KubeSpawner key with its Go name.
type fieldKey struct{ snake, goName string }

var fieldKeys = []fieldKey{
	{"userid", "UserID"},
	{"unescaped_username", "UnescapedUsername"},
	{"unescaped_servername", "UnescapedServername"},
	{"hubnamespace", "HubNamespace"},
	{"username", "Username"},
	{"servername", "Servername"},
	{"user_server", "UserServer"},
	{"safe_username", "SafeUsername"},
	{"safe_servername", "SafeServername"},
	{"safe_user_server", "SafeUserServer"},
	{"escaped_username", "EscapedUsername"},
	{"escaped_servername", "EscapedServername"},
	{"escaped_user_server", "EscapedUserServer"},
	{"pod_name", "PodName"},
	{"pvc_name", "PVCName"},
	{"namespace", "Namespace"},
}

// field returns the value of a snake_case key.
func (f Fields) field(key string) (string, bool) {
	switch key {
	case "userid":
		return strconv.FormatInt(f.UserID, 10), true
	case "unescaped_username":
		return f.UnescapedUsername, true
	case "unescaped_servername":
		return f.UnescapedServername, true
	case "hubnamespace":
		return f.HubNamespace, true
	case "username":
		return f.Username, true
	case "servername":
		return f.Servername, true
	case "user_server":
		return f.UserServer, true
	case "safe_username":
		return f.SafeUsername, true
	case "safe_servername":
		return f.SafeServername, true
	case "safe_user_server":
		return f.SafeUserServer, true
	case "escaped_username":
		return f.EscapedUsername, true
	case "escaped_servername":
		return f.EscapedServername, true
	case "escaped_user_server":
		return f.EscapedUserServer, true
	case "pod_name":
		return f.PodName, true
	case "pvc_name":
		return f.PVCName, true
	case "namespace":
		return f.Namespace, true
	}
	return "", false
}

// Map returns the fields as KubeSpawner's keyword dict (userid as a
// decimal string).
func (f Fields) Map() map[string]string {
	m := make(map[string]string, len(fieldKeys))
	for _, k := range fieldKeys {
		m[k.snake], _ = f.field(k.snake)
	}
	return m
}

// NewFields computes the template fields of a server under a scheme, as
// KubeSpawner's _expand_user_properties does. hubNamespace is the
// namespace the hub runs in ("default" gives hubnamespace "user"); it is
// also Namespace until a Namer fills in the rendered names. PodName and
// PVCName are left empty.
func NewFields(s Server, scheme Scheme, hubNamespace string) (Fields, error) {
	if err := ValidateServer(s); err != nil {
		return Fields{}, err
	}
	f := Fields{
		UserID:              s.UserID,
		UnescapedUsername:   s.Username,
		UnescapedServername: s.Servername,
		HubNamespace:        hubNamespace,
		EscapedUsername:     EscapeSlug(s.Username),
		EscapedServername:   EscapeSlug(s.Servername),
		Namespace:           hubNamespace,
	}
	if f.HubNamespace == "default" {
		f.HubNamespace = "user"
	}
	f.EscapedUserServer = f.EscapedUsername + "--" + f.EscapedServername

	// SafeSlug and MultiSlug cannot fail at DefaultMultiSlugLength.
	f.SafeUsername, _ = SafeSlug(s.Username, DefaultMultiSlugLength)
	if s.Servername != "" {
		f.SafeServername, _ = SafeSlug(s.Servername, DefaultMultiSlugLength)
	}
	// The safe parts are ASCII, so len counts what Python's len counts.
	switch {
	case len(f.SafeUsername)+len(f.SafeServername)+2 > DefaultMultiSlugLength:
		f.SafeUserServer, _ = MultiSlug([]string{s.Username, s.Servername}, DefaultMultiSlugLength)
	case s.Servername != "":
		f.SafeUserServer = f.SafeUsername + "--" + f.SafeServername
	default:
		f.SafeUserServer = f.SafeUsername
	}

	switch scheme {
	case SchemeSafe, "":
		f.Username, f.Servername, f.UserServer = f.SafeUsername, f.SafeServername, f.SafeUserServer
	case SchemeEscape:
		f.Username, f.Servername, f.UserServer = f.EscapedUsername, f.EscapedServername, f.EscapedUsername
		if f.EscapedServername != "" {
			f.UserServer = f.EscapedUsername + "--" + f.EscapedServername
		}
	default:
		return Fields{}, fmt.Errorf("naming: slug scheme must be %q or %q, not %q", SchemeSafe, SchemeEscape, scheme)
	}
	return f, nil
}
