package naming

import (
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// checkDNS compares the regexp-free checks with apimachinery's on v.
func checkDNS(t *testing.T, v string) {
	t.Helper()
	if got, want := dnsLabelOK(v), len(validation.IsDNS1123Label(v)) == 0; got != want {
		t.Errorf("dnsLabelOK(%q) = %v, apimachinery says valid = %v", v, got, want)
	}
	if got, want := dnsSubdomainOK(v), len(validation.IsDNS1123Subdomain(v)) == 0; got != want {
		t.Errorf("dnsSubdomainOK(%q) = %v, apimachinery says valid = %v", v, got, want)
	}
}

func TestDNSChecksMatchApimachinery(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, v := range []string{"", "a", "-", ".", "a-", "-a", "a-b", "a.b", "a..b", ".a", "a.", "a.-b", "a-.b", "A", "aB",
		"jupyter-alice", "jupyter-alice-2d5f", "claim-x.example.com", "é", "a_b", "a b",
		long(63), long(64), long(253), long(254), long(63) + "." + long(63), long(64) + ".a",
		strings.Repeat(long(63)+".", 4)[:253], strings.Repeat(long(63)+".", 4)[:254]} {
		checkDNS(t, v)
	}
	// Every byte alone, and next to and between the characters the
	// rules treat differently.
	for c := range 256 {
		checkDNS(t, string([]byte{byte(c)}))
		for _, d := range []byte("a-.Z0_ \xff") {
			checkDNS(t, string([]byte{byte(c), d}))
			checkDNS(t, string([]byte{d, byte(c)}))
			checkDNS(t, string([]byte{'a', byte(c), d, 'z'}))
			checkDNS(t, string([]byte{'a', '.', byte(c), d, '.', 'z'}))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("az09-.-.A_ \xff")
	for range 20000 {
		b := make([]byte, rng.IntN(80))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		checkDNS(t, string(b))
	}
}

// TestDNSCheckReasonsAreApimachinerys: a rejected name gets apimachinery's
// own reasons; an accepted one none.
func TestDNSCheckReasonsAreApimachinerys(t *testing.T) {
	for _, v := range []string{"Bad_Name", "-x", "a.b", strings.Repeat("a", 64)} {
		got, want := isDNS1123Label(v), validation.IsDNS1123Label(v)
		if len(want) == 0 || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("isDNS1123Label(%q) = %q, want apimachinery's %q", v, got, want)
		}
	}
	for _, v := range []string{"Bad", "a..b", "x.", strings.Repeat("a", 254)} {
		got, want := isDNS1123Subdomain(v), validation.IsDNS1123Subdomain(v)
		if len(want) == 0 || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("isDNS1123Subdomain(%q) = %q, want apimachinery's %q", v, got, want)
		}
	}
	if r := isDNS1123Label("jupyter-alice"); r != nil {
		t.Errorf("a valid label has reasons %q", r)
	}
	if r := isDNS1123Subdomain("jupyter-alice.hub.svc"); r != nil {
		t.Errorf("a valid subdomain has reasons %q", r)
	}
}

func FuzzDNSChecks(f *testing.F) {
	for _, v := range []string{"", "jupyter-alice", "a.b", "-x", strings.Repeat("x", 64)} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) { checkDNS(t, v) })
}
