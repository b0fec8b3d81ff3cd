package spawner

import (
	"math"
	"strconv"
	"strings"

	"github.com/spawnkit/spawnkit/kubespawner"
)

// envDict is an ordered dict with Python's semantics: setting a key that
// exists keeps its position.
type envDict []kubespawner.EnvEntry

func (d *envDict) set(name string, v any) {
	for i := range *d {
		if (*d)[i].Name == name {
			(*d)[i].Value = v
			return
		}
	}
	*d = append(*d, kubespawner.EnvEntry{Name: name, Value: v})
}

// pyFloatString formats f as Python's str(float).
func pyFloatString(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if strings.Contains(s, "e") {
		// Python: 1e-05, Go: 1e-05; Python 1e+16, Go 1e+16.
		return s
	}
	return s
}
