package naming

import (
	"strings"
	"unicode/utf8"
)

// ValidateServer rejects user and server names no hub can have: an empty
// user name, and names holding a NUL byte or invalid UTF-8. Such names
// would otherwise hash into a valid-looking object name
// ("jupyter-x---e3b0c442") that belongs to no real user. The error is an
// *InvalidNameError whose Field is "username" or "servername". Namer and
// NewFields call it; a service can call it on input first.
func ValidateServer(s Server) error {
	for _, n := range []struct{ field, value string }{{"username", s.Username}, {"servername", s.Servername}} {
		var reasons []string
		if n.field == "username" && n.value == "" {
			reasons = append(reasons, "must not be empty")
		}
		if strings.IndexByte(n.value, 0) >= 0 {
			reasons = append(reasons, "must not contain a NUL byte")
		}
		if !utf8.ValidString(n.value) {
			reasons = append(reasons, "must be valid UTF-8")
		}
		if len(reasons) > 0 {
			return &InvalidNameError{Field: n.field, Value: n.value, Reasons: reasons}
		}
	}
	return nil
}
