package manifest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// labelValueOK, which spares valid label values apimachinery's regular
// expression, judges every value as validation.IsValidLabelValue does:
// edge cases, every single byte and pair, and random strings over an
// alphabet rich in the characters that matter.
func TestLabelValueOKMatchesApimachinery(t *testing.T) {
	check := func(v string) {
		t.Helper()
		if got, want := labelValueOK(v), len(validation.IsValidLabelValue(v)) == 0; got != want {
			t.Errorf("labelValueOK(%q) = %v, apimachinery says valid = %v", v, got, want)
		}
	}
	for _, v := range []string{"", "a", "-", "_", ".", "a-", "-a", "a_b", "a.b", "a..b", "A9", "é", "a b", "a/b",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b", "a" + strings.Repeat("-", 62) + "b"} {
		check(v)
	}
	for c := range 256 {
		check(string(rune(c)))
		check(string([]byte{byte(c)}))
		for _, d := range []byte("a-_.Z0 /\xff") {
			check(string([]byte{byte(c), d}))
			check(string([]byte{d, byte(c)}))
			check(string([]byte{'a', byte(c), d, 'z'}))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("aZ09-_.-_. /:\x00\xff")
	for range 20000 {
		b := make([]byte, rng.IntN(70))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		check(string(b))
	}
}

func FuzzLabelValueOK(f *testing.F) {
	for _, v := range []string{"", "singleuser-server", "-bad", "a.b_c", strings.Repeat("x", 64)} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := labelValueOK(v), len(validation.IsValidLabelValue(v)) == 0; got != want {
			t.Errorf("labelValueOK(%q) = %v, apimachinery says valid = %v", v, got, want)
		}
	})
}
