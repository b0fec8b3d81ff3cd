package vectorrules

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

var ruleName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Check reports a rule that breaks the contract: a kebab-case name and a
// reason of one sentence.
func Check(name, reason string) error {
	if !ruleName.MatchString(name) {
		return fmt.Errorf("vectorrules: rule name %q is not kebab-case", name)
	}
	r := strings.TrimSpace(reason)
	if r == "" {
		return fmt.Errorf("vectorrules: rule %s has no reason", name)
	}
	if i := strings.Index(strings.TrimSuffix(r, "."), ". "); i >= 0 && i+2 < len(r) && r[i+2] >= 'A' && r[i+2] <= 'Z' {
		return fmt.Errorf("vectorrules: the reason of rule %s is more than one sentence", name)
	}
	return nil
}

// Tally counts the cases of one vector file.
type Tally struct {
	// Neutral are rules that do not stop a case from counting as exact
	// (spawnkit's identity on every object).
	Neutral []string

	cases, exact, failing int
	byRule                map[string]int
}

// Record counts one case: the rules it needed and whether it passed.
func (t *Tally) Record(rules []string, passed bool) {
	t.cases++
	if !passed {
		t.failing++
		return
	}
	if t.byRule == nil {
		t.byRule = map[string]int{}
	}
	exact := true
	for _, r := range rules {
		t.byRule[r]++
		if !slices.Contains(t.Neutral, r) {
			exact = false
		}
	}
	if exact {
		t.exact++
	}
}

// Exact is the number of cases that matched with no rule but neutral ones.
func (t *Tally) Exact() int { return t.exact }

// Failing is the number of cases that did not pass.
func (t *Tally) Failing() int { return t.failing }

// ByRule is the number of passing cases each rule applied to.
func (t *Tally) ByRule() map[string]int { return maps.Clone(t.byRule) }

// String is the summary a vector test logs:
// "checked N cases: E exact, n via rule x, ...; F failing".
func (t *Tally) String() string {
	parts := []string{fmt.Sprintf("%d exact", t.exact)}
	for _, r := range slices.Sorted(maps.Keys(t.byRule)) {
		parts = append(parts, fmt.Sprintf("%d via rule %s", t.byRule[r], r))
	}
	return fmt.Sprintf("checked %d cases: %s; %d failing", t.cases, strings.Join(parts, ", "), t.failing)
}
