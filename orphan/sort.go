package orphan

import (
	"slices"
	"strings"
)

// kindOrder is k's place among the kinds in alphabetical order, the
// order orphans have always been sorted in (Namespace,
// PersistentVolumeClaim, Pod, Secret, Service).
func kindOrder(k Kind) uint8 { return uint8(slices.Index(kindsByName, k)) }

var kindsByName = slices.Sorted(slices.Values(AllKinds))

// sortVerdicts returns vs in order of kind, namespace and name. Parts of
// vs are sorted at once (inParts), then merged. Names are compared by an
// abbreviated key first (PostgreSQL's trick): the eight bytes after the
// prefix all the names share ("jupyter-" at least), as a number held in
// the verdict, so that most comparisons read no name.
func sortVerdicts(vs []verdict) []*verdict {
	// The shared prefix: each part's, then theirs.
	prefixes := make([]string, numParts(len(vs)))
	inParts(len(vs), len(prefixes), func(part, lo, hi int) { prefixes[part] = sharedPrefix(vs[lo:hi]) })
	common := prefixes[0]
	for _, p := range prefixes[1:] {
		common = common[:commonLen(common, p)]
	}
	skip := len(common)
	runs := make([][]verdict, len(prefixes))
	inParts(len(vs), len(runs), func(part, lo, hi int) {
		run := vs[lo:hi]
		for i := range run {
			run[i].abbrev = abbreviate(run[i].name, skip)
		}
		slices.SortFunc(run, func(a, b verdict) int { return compareVerdicts(&a, &b) })
		runs[part] = run
	})
	out := make([]*verdict, 0, len(vs))
	if len(runs) == 1 {
		for i := range runs[0] {
			out = append(out, &runs[0][i])
		}
		return out
	}
	for {
		best := -1
		for r, run := range runs {
			if len(run) > 0 && (best < 0 || compareVerdicts(&run[0], &runs[best][0]) < 0) {
				best = r
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, &runs[best][0])
		runs[best] = runs[best][1:]
	}
}

// compareVerdicts orders by kind, namespace and name, reading the names
// only when their abbreviated keys are equal.
func compareVerdicts(a, b *verdict) int {
	if a.kind != b.kind {
		return int(a.kind) - int(b.kind)
	}
	if c := strings.Compare(a.namespace, b.namespace); c != 0 {
		return c
	}
	if a.abbrev != b.abbrev {
		if a.abbrev < b.abbrev {
			return -1
		}
		return 1
	}
	return strings.Compare(a.name, b.name)
}

// sharedPrefix is the longest prefix of every name in vs.
func sharedPrefix(vs []verdict) string {
	if len(vs) == 0 {
		return ""
	}
	common := vs[0].name
	for _, v := range vs[1:] {
		common = common[:commonLen(common, v.name)]
	}
	return common
}

func commonLen(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// abbreviate is up to eight bytes of name from skip on, big-endian and
// zero-padded: keys order as the names do, and equal keys leave the
// order to the names themselves.
func abbreviate(name string, skip int) uint64 {
	var k uint64
	for i := range 8 {
		k <<= 8
		if j := skip + i; j < len(name) {
			k |= uint64(name[j])
		}
	}
	return k
}
