package kubespawner

import "regexp"

// EventRules are event_message_rules compiled, once per start: a Config
// is shared by concurrent starts and never written. They are read-only
// and safe for concurrent use.
type EventRules []compiledRule

type compiledRule struct {
	EventMessageRule
	re *regexp.Regexp // nil: any message
}

// CompileEventRules compiles rules; Load and Validate have checked them,
// so a rule that does not compile (a Go-built Config never validated) is
// skipped.
func CompileEventRules(rules []EventMessageRule) EventRules {
	out := make(EventRules, 0, len(rules))
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

// Message applies the rules in order to an event's reason and message:
// the first that matches decides what the event says (keep false:
// nothing).
func (rs EventRules) Message(reason, message string) (shown string, keep bool) {
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
