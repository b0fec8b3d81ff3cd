package kubespawner

import "strings"

// droppedRoots are the paths allowed_dropped_fields entries start with.
var droppedRoots = []string{"spec", "metadata.labels", "metadata.annotations"}

// DroppedAllowed is for package spawner's dropped-field check. It reports
// whether the allowed_dropped_fields entry a covers the
// dropped field path f: "*", f itself, or a path f is beneath.
func DroppedAllowed(f, a string) bool {
	if a == "*" || f == a {
		return true
	}
	rest, ok := strings.CutPrefix(f, a)
	return ok && (rest[0] == '.' || rest[0] == '[')
}
