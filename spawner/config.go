package spawner

import (
	"regexp"

	"github.com/spawnkit/spawnkit/kubespawner"
)

func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// eventRules are a start's event_message_rules, compiled once per start
// (a Config is shared by concurrent starts and never written).
type eventRules []compiledRule

type compiledRule struct {
	kubespawner.EventMessageRule
	re *regexp.Regexp // nil: any message
}

// compileEventRules compiles rules; validate has checked them, so a rule
// that does not compile (a Go-built Config never validated) is skipped.
func compileEventRules(rules []kubespawner.EventMessageRule) eventRules {
	out := make(eventRules, 0, len(rules))
	for _, r := range rules {
		c := compiledRule{EventMessageRule: r}
		if r.Match != "" {
			re, err := regexp.Compile(r.Match)
			if err != nil {
				continue
			}
			c.re = re
		}
		out = append(out, c)
	}
	return out
}

// message applies the rules in order: the first that matches decides
// what the event says (keep false: nothing).
func (rs eventRules) message(reason, message string) (shown string, keep bool) {
	for _, r := range rs {
		if r.Reason != "" && r.Reason != reason {
			continue
		}
		var m []int
		if r.re != nil {
			if m = r.re.FindStringSubmatchIndex(message); m == nil {
				continue
			}
		}
		switch {
		case r.Drop:
			return "", false
		case r.re == nil:
			return r.Replace, true
		default:
			return string(r.re.ExpandString(nil, r.Replace, message, m)), true
		}
	}
	return message, true
}
