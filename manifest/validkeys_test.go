package manifest

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Remembering valid keys never changes a verdict: a key is judged as
// apimachinery judges it, the first time and every time after, and the
// set of remembered keys stops growing at its bound.
func TestValidKeysAreRememberedNotInvented(t *testing.T) {
	keys := []string{"app", "hub.jupyter.org/username", "example.com/a.b_c", "", "-bad", "a/b/c", "UPPER.example.com/x",
		"x." + string(make([]byte, 300)), "ok-" + fmt.Sprint(1)}
	for round := range 3 {
		for _, k := range keys {
			if got, want := isQualifiedName(k), validation.IsQualifiedName(k); !slices.Equal(got, want) {
				t.Errorf("round %d: isQualifiedName(%q) = %v, want %v", round, k, got, want)
			}
		}
	}
	for _, v := range []string{"", "singleuser-server", "-bad", "a.b_c", string(make([]byte, 70))} {
		if got, want := isValidLabelValue(v), validation.IsValidLabelValue(v); !slices.Equal(got, want) {
			t.Errorf("isValidLabelValue(%q) = %v, want %v", v, got, want)
		}
	}
	if _, ok := validValues.m.Load("-bad"); ok {
		t.Error("an invalid label value was remembered")
	}
	if _, ok := validKeys.m.Load("-bad"); ok {
		t.Error("an invalid key was remembered")
	}
	for i := range 2 * maxValid {
		isQualifiedName(fmt.Sprintf("example.com/key-%d", i))
	}
	if n := validKeys.n.Load(); n > maxValid {
		t.Errorf("%d keys remembered, more than the bound %d", n, maxValid)
	}
	if errs := isQualifiedName("-still-bad-after-the-bound"); len(errs) == 0 {
		t.Error("an invalid key passed once the set was full")
	}
}
