package orphan

import (
	goruntime "runtime"
	"sync"
)

// minPerPart is the fewest items worth a core of their own: below it
// the goroutines cost more than they save.
const minPerPart = 8192

// numParts is how many parts inParts splits n items into: one a core
// (GOMAXPROCS, at most maxParts), each of at least minPerPart items.
func numParts(n int) int {
	return max(1, min(goruntime.GOMAXPROCS(0), n/minPerPart, maxParts))
}

// inParts calls f on parts (numParts(n), computed once by the caller,
// which sizes its per-part results by it) consecutive parts [lo, hi) of
// [0, n), numbered from 0, at once when there is more than one, and
// returns when every call has returned. The passes it splits are
// memory-bound (each item a pointer into a large cache), so they gain
// nearly a core's worth each.
func inParts(n, parts int, f func(part, lo, hi int)) {
	if parts <= 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() { f(i, i*n/parts, (i+1)*n/parts) })
	}
	wg.Wait()
}

// maxParts bounds the parts: merging k sorted parts costs k comparisons
// an item.
const maxParts = 8
