package naming

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Slugify makes a profile slug from a display name, like python-slugify
// for Latin text: accents dropped, lowercase, runs of anything else '-'.
func Slugify(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range norm.NFKD.String(s) {
		if unicode.Is(unicode.Mn, r) {
			continue
		}
		r = unicode.ToLower(r)
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}
