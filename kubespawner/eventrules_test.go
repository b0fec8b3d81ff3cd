package kubespawner

import "testing"

func TestEventRulesFirstMatchDecides(t *testing.T) {
	rules := CompileEventRules([]EventMessageRule{
		{Reason: "Scheduled", Match: `to (?P<node>\S+)$`, Replace: "Your server was placed on ${node}"},
		{Reason: "Pulling", Drop: true},
		{Match: `(?i)back-off.*`, Replace: "Retrying: $0"},
		{Reason: "Started", Replace: "Your server is starting"},
	})
	for _, c := range []struct {
		reason, message, want string
		keep                  bool
	}{
		{"Scheduled", "Successfully assigned jhub/jupyter-ada to node-1", "Your server was placed on node-1", true},
		{"Scheduled", "no match here", "no match here", true},
		{"Pulling", "Pulling image \"x\"", "", false},
		{"BackOff", "Back-off pulling image", "Retrying: Back-off pulling image", true},
		{"Started", "Started container notebook", "Your server is starting", true},
		{"Created", "Created container notebook", "Created container notebook", true},
	} {
		got, keep := rules.Message(c.reason, c.message)
		if got != c.want || keep != c.keep {
			t.Errorf("%s %q: %q, %v; want %q, %v", c.reason, c.message, got, keep, c.want, c.keep)
		}
	}
}
