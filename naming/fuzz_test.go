package naming

import (
	"errors"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

var fuzzSeeds = [][2]string{
	{"alice", ""},
	{"alice", "gpu"},
	{"Alice@example.com", "My Server"},
	{"user--x", ""},
	{"user", "-x"},
	{"a", "b--c"},
	{"ünïcödé", "İK"},
	{"", ""},
	{"x---deadbeef", ""},
	{"0numeric", "server.name"},
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"},
	{"a\xffb", "\x00"},
}

var (
	defaultNamer = mustNew(Options{})
	escapeNamer  = mustNew(Options{Scheme: SchemeEscape, UserNamespaces: true})
	userNSNamer  = mustNew(Options{UserNamespaces: true, HubNamespace: "jhub"})
)

func mustNew(o Options) *Namer {
	n, err := New(o)
	if err != nil {
		panic(err)
	}
	return n
}

// FuzzNamesValid: under the safe scheme every rendered name is valid for
// every input and every label value is valid; under the escape scheme Names
// either returns valid names or an *InvalidNameError, never an invalid name.
func FuzzNamesValid(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, username, servername string) {
		s := Server{Username: username, Servername: servername}
		if invalidServer(s) {
			for _, n := range []*Namer{defaultNamer, userNSNamer, escapeNamer} {
				if _, err := n.Names(s); !IsInvalidName(err) {
					t.Fatalf("%q/%q: Names = %v, want an *InvalidNameError", username, servername, err)
				}
			}
			return
		}
		for _, n := range []*Namer{defaultNamer, userNSNamer} {
			names, err := n.Names(s)
			if err != nil {
				t.Fatalf("safe scheme failed for %q/%q: %v", username, servername, err)
			}
			checkNames(t, names, n.opts.UserNamespaces)
		}
		for k, v := range PodLabels(s, "", nil, KubeSpawnerCommonLabels()) {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Fatalf("label %s=%q for %q/%q: %v", k, v, username, servername, errs)
			}
		}
		names, err := escapeNamer.Names(s)
		if err != nil {
			if !IsInvalidName(err) {
				t.Fatalf("escape scheme: unexpected error type %v", err)
			}
			return
		}
		checkNames(t, names, true)
	})
}

func checkNames(t *testing.T, n Names, userNS bool) {
	t.Helper()
	label := []string{n.Pod}
	if userNS {
		label = append(label, n.Namespace)
	}
	for _, v := range label {
		if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
			t.Fatalf("%q is not a DNS label: %v (names %+v)", v, errs, n)
		}
	}
	for _, v := range []string{n.PVC, n.Secret, n.DNS} {
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			t.Fatalf("%q is not a DNS subdomain: %v (names %+v)", v, errs, n)
		}
	}
}

var hashSuffix = regexp.MustCompile(`---([0-9a-f]{8})$`)

// FuzzPodNameInjective: two distinct (username, servername) pairs never get
// the same pod name under the default safe templates, unless both names
// end in the same 8-hex hash, which would be a sha256 prefix collision.
func FuzzPodNameInjective(f *testing.F) {
	for i, a := range fuzzSeeds {
		b := fuzzSeeds[(i+1)%len(fuzzSeeds)]
		f.Add(a[0], a[1], b[0], b[1])
	}
	// Pairs that collide in naive schemes.
	f.Add("a--b", "", "a", "b")
	f.Add("a", "b--c", "a--b", "c")
	f.Add("user", "x---deadbeef", "user--x", "deadbeef")
	f.Fuzz(func(t *testing.T, u1, s1, u2, s2 string) {
		if u1 == u2 && s1 == s2 || invalidServer(Server{Username: u1, Servername: s1}) || invalidServer(Server{Username: u2, Servername: s2}) {
			return
		}
		n1, err1 := defaultNamer.Names(Server{Username: u1, Servername: s1})
		n2, err2 := defaultNamer.Names(Server{Username: u2, Servername: s2})
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if n1.Pod != n2.Pod {
			return
		}
		m1, m2 := hashSuffix.FindStringSubmatch(n1.Pod), hashSuffix.FindStringSubmatch(n2.Pod)
		if m1 == nil || m2 == nil || m1[1] != m2[1] {
			t.Fatalf("(%q, %q) and (%q, %q) both name pod %q without a hash collision", u1, s1, u2, s2, n1.Pod)
		}
		t.Logf("8-hex hash collision (expected about once in 2^32 pairs): %q", n1.Pod)
	})
}
