package naming

import (
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
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

// isDNS1123Label is validation.IsDNS1123Label without its regexp for the
// names that pass (every spawn renders and checks its names; a regexp
// match allocates and costs microseconds): a name dnsLabelOK accepts has
// no reasons, and only a rejected one goes to apimachinery for its
// verdict and messages.
func isDNS1123Label(v string) []string {
	if dnsLabelOK(v) {
		return nil
	}
	return validation.IsDNS1123Label(v)
}

// isDNS1123Subdomain is validation.IsDNS1123Subdomain in the same way.
func isDNS1123Subdomain(v string) []string {
	if dnsSubdomainOK(v) {
		return nil
	}
	return validation.IsDNS1123Subdomain(v)
}

// dnsLabelOK reports whether v is an RFC 1123 label as apimachinery
// defines it: 1 to 63 characters of [a-z0-9-], alphanumeric at both
// ends. TestDNSChecksMatchApimachinery holds it to
// validation.IsDNS1123Label.
func dnsLabelOK(v string) bool {
	return len(v) <= validation.DNS1123LabelMaxLength && labelChars(v)
}

// dnsSubdomainOK reports whether v is an RFC 1123 subdomain as
// apimachinery defines it: at most 253 characters, labels of [a-z0-9-]
// (alphanumeric at both ends, no length of their own) joined by dots.
func dnsSubdomainOK(v string) bool {
	if len(v) > validation.DNS1123SubdomainMaxLength {
		return false
	}
	for {
		i := strings.IndexByte(v, '.')
		if i < 0 {
			return labelChars(v)
		}
		if !labelChars(v[:i]) {
			return false
		}
		v = v[i+1:]
	}
}

// labelChars reports whether v is non-empty, of [a-z0-9-], and
// alphanumeric at both ends (the regexp [a-z0-9]([-a-z0-9]*[a-z0-9])?).
func labelChars(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			continue
		}
		if c != '-' || i == 0 || i == len(v)-1 {
			return false
		}
	}
	return true
}
