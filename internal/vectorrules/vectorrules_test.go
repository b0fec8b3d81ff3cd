package vectorrules

import "testing"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		ok           bool
	}{
		{"api-rejects", "the API server rejects it, so spawnkit refuses it up front.", true},
		{"api-rejects", "one (e.g. this). still one sentence", true},
		{"API_rejects", "x", false},
		{"no-reason", " ", false},
		{"two", "It is one. It is two.", false},
	} {
		if err := Check(tc.name, tc.reason); (err == nil) != tc.ok {
			t.Errorf("Check(%q, %q) = %v", tc.name, tc.reason, err)
		}
	}
}

func TestTally(t *testing.T) {
	tl := Tally{Neutral: []string{"identity"}}
	tl.Record(nil, true)
	tl.Record([]string{"identity"}, true)
	tl.Record([]string{"identity", "api-rejects"}, true)
	tl.Record([]string{"api-rejects"}, false)
	const want = "checked 4 cases: 2 exact, 1 via rule api-rejects, 2 via rule identity; 1 failing"
	if got := tl.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if tl.Exact() != 2 || tl.Failing() != 1 || tl.ByRule()["identity"] != 2 {
		t.Errorf("counts: exact %d failing %d by rule %v", tl.Exact(), tl.Failing(), tl.ByRule())
	}
}
