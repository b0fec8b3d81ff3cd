package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// hashLength is the number of hex digits of sha256 in a hashed slug.
	hashLength = 8
	// defaultHashedLength is the length of a hashed SafeSlug when no limit
	// is given (KubeSpawner's strip_and_hash default).
	defaultHashedLength = 32
	// maxLabelLength bounds object names and label values (DNS-1123 label).
	maxLabelLength = 63
	// DefaultMultiSlugLength is MultiSlug's default maximum length, and the
	// length KubeSpawner allows each of safe_username, safe_servername and
	// safe_user_server.
	DefaultMultiSlugLength = 48
)

// EscapeSlug is KubeSpawner's legacy "escape" scheme (escapism 1.0.1 with
// safe characters [a-z0-9] and escape character '-', then lowercased):
// every character but a-z and 0-9 becomes '-' followed by the uppercase
// hex of each of its UTF-8 bytes, not zero-padded, and the result is
// lowercased. 'A' becomes "-41", '\t' "-9", 'é' "-c3-a9". Bytes that are
// not valid UTF-8 are escaped one by one, so distinct inputs stay distinct.
//
// The result may be longer than 63 characters or end in '-'; it is not
// guaranteed to be a valid object name. Prefer SafeSlug for new hubs.
func EscapeSlug(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
			continue
		}
		// Every byte of a multi-byte character is escaped on its own,
		// exactly as escapism does with c.encode('utf8').
		b.WriteByte('-')
		writeHexNoPad(&b, c)
	}
	return b.String()
}

// writeHexNoPad writes c as lowercase hex without a leading zero
// (Python's '%X' % c, lowered).
func writeHexNoPad(b *strings.Builder, c byte) {
	const digits = "0123456789abcdef"
	if c >= 0x10 {
		b.WriteByte(digits[c>>4])
	}
	b.WriteByte(digits[c&0xf])
}

// IsValidObjectName reports whether s is usable unchanged as an object
// name by the safe scheme: 1 to 63 characters of [a-z0-9-], starting with
// a letter and ending with a letter or digit (a DNS-1035 label, hence also
// a DNS-1123 label and a label value).
func IsValidObjectName(s string) bool {
	if s == "" || len(s) > maxLabelLength {
		return false
	}
	if !isLowerAlpha(s[0]) || !isLowerAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLowerAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

// IsValidLabel reports whether s is a valid Kubernetes label value: empty,
// or up to 63 characters of [A-Za-z0-9._-] starting and ending with an
// alphanumeric.
//
// KubeSpawner 7.1's is_valid_label matches its pattern case-insensitively
// on a Unicode string, so it also accepts U+0130, U+0131, U+017F and the
// Kelvin sign inside a value, which the API server rejects. spawnkit
// follows the API server (see the vector test's deviations).
func IsValidLabel(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > maxLabelLength || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// SafeSlug is KubeSpawner 7.1's "safe" scheme (slugs.safe_slug) for object
// names. A name that is a valid object name (IsValidObjectName), contains
// no "--" and fits maxLength is returned unchanged. Any other name is
// hashed (StripAndHash): lowercased, runs of anything but [a-z0-9]
// replaced by '-', prefixed "x-" unless it starts with a letter,
// truncated, then "---" and the first 8 hex digits of sha256 of the UTF-8
// name. Names containing "--" are always hashed, so a hashed slug can
// never equal a kept one, nor a "{user}--{server}" join.
//
// maxLength 0 means KubeSpawner's default: valid names up to 63 are kept
// and hashed names are 32 long. Lengths count Unicode code points, as
// Python does. An error is returned when hashing is needed and maxLength
// is below 12.
func SafeSlug(name string, maxLength int) (string, error) {
	return safeSlug(name, IsValidObjectName, maxLength)
}

// SafeLabel is SafeSlug for label values (KubeSpawner's
// safe_slug(name, is_valid=is_valid_label)): a valid label value is kept,
// anything else hashed to 32 characters. It never fails.
func SafeLabel(name string) string {
	s, err := safeSlug(name, IsValidLabel, 0)
	if err != nil {
		panic(err) // unreachable: the default length can always hash
	}
	return s
}

func safeSlug(name string, valid func(string) bool, maxLength int) (string, error) {
	if !strings.Contains(name, "--") && valid(name) &&
		(maxLength == 0 || utf8.RuneCountInString(name) <= maxLength) {
		return name, nil
	}
	if maxLength == 0 {
		maxLength = defaultHashedLength
	}
	return StripAndHash(name, maxLength)
}

// StripAndHash always hashes (KubeSpawner's strip_and_hash): the safe part
// of name truncated to maxLength-11 characters, "---", and 8 hex digits of
// sha256(name). The result is a valid object name of at most maxLength
// characters, containing "---" exactly once. maxLength 0 means 32; below
// 12 is an error.
func StripAndHash(name string, maxLength int) (string, error) {
	if maxLength == 0 {
		maxLength = defaultHashedLength
	}
	nameLength := maxLength - (hashLength + 3)
	if nameLength < 1 {
		return "", fmt.Errorf("naming: cannot make safe names shorter than %d (max length %d)", hashLength+4, maxLength)
	}
	sum := sha256.Sum256([]byte(name))
	return extractSafeName(name, nameLength) + "---" + hex.EncodeToString(sum[:hashLength/2]), nil
}

// MultiSlug joins several names into one slug with a single hash
// (KubeSpawner's multi_slug): each name's safe part, truncated to
// ((maxLength-9)/len(names))-2 characters, joined by "--", then "---" and
// 8 hex digits of sha256 over the UTF-8 names separated by 0xFF bytes
// (which never occur in UTF-8, so shifting characters between names
// changes the hash). maxLength 0 means 48. It is an error when names is
// empty or leaves fewer than 2 characters per name.
func MultiSlug(names []string, maxLength int) (string, error) {
	if len(names) == 0 {
		return "", fmt.Errorf("naming: multi slug of no names")
	}
	if maxLength == 0 {
		maxLength = DefaultMultiSlugLength
	}
	h := sha256.New()
	for i, n := range names {
		if i > 0 {
			h.Write([]byte{0xff})
		}
		h.Write([]byte(n))
	}
	sum := h.Sum(nil)
	perName := (maxLength-(hashLength+1))/len(names) - 2
	if perName < 2 {
		return "", fmt.Errorf("naming: not enough characters for %d names in a multi slug of max length %d", len(names), maxLength)
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = extractSafeName(n, perName)
	}
	return strings.Join(parts, "--") + "---" + hex.EncodeToString(sum[:hashLength/2]), nil
}

// extractSafeName is KubeSpawner's _extract_safe_name: lowercase (Python
// semantics), replace each run of characters outside [a-z0-9] with '-',
// trim leading '-', truncate, trim trailing '-', prefix "x-" when it does
// not start with a letter (truncating again, which may leave a trailing
// '-', as KubeSpawner does), and "x" when nothing is left.
func extractSafeName(name string, maxLength int) string {
	// After the substitution the string is pure ASCII, so byte lengths
	// equal the code-point lengths Python counts.
	b := make([]byte, 0, len(name))
	dash := false
	emit := func(c byte) {
		if isLowerAlnum(c) {
			b = append(b, c)
			dash = false
		} else if !dash {
			b = append(b, '-')
			dash = true
		}
	}
	for i, w := 0, 0; i < len(name); i += w {
		r, width := utf8.DecodeRuneInString(name[i:])
		w = width
		switch {
		case r < utf8.RuneSelf:
			c := byte(r)
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			emit(c)
		case r == '\u0130':
			// Python: 'İ'.lower() == 'i' + U+0307 COMBINING DOT ABOVE.
			emit('i')
			emit('-')
		case r == '\u212a':
			// Python: KELVIN SIGN lowers to ASCII 'k'.
			emit('k')
		default:
			// Every other non-ASCII code point lowers to non-ASCII code
			// points, which the substitution turns into '-'.
			emit('-')
		}
	}
	s := strings.TrimLeft(string(b), "-")
	if len(s) > maxLength {
		s = s[:maxLength]
	}
	s = strings.TrimRight(s, "-")
	if s != "" && !isLowerAlpha(s[0]) {
		s = "x-" + pyPrefix(s, maxLength-2)
	}
	if s == "" {
		s = "x"
	}
	return s
}

// pyPrefix is Python's s[:n], where a negative n counts from the end.
func pyPrefix(s string, n int) string {
	if n < 0 {
		n = max(len(s)+n, 0)
	}
	return s[:min(n, len(s))]
}

func isLowerAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isLowerAlnum(c byte) bool { return isLowerAlpha(c) || c >= '0' && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }
