package kubespawner

import (
	"encoding/json"
	"strings"
	"testing"
)

// WithOptions sets a hub's options over a base configuration as traitlets
// sets traits: whole values, null unsets, the environment's order kept.
func TestWithOptions(t *testing.T) {
	base, err := Load([]byte(`
image: base/image:1
extra_labels: {team: base, keep: "yes"}
environment: {B: "2", A: "1"}
cpu_limit: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := base.WithOptions(map[string]json.RawMessage{
		"image":        json.RawMessage(`"hub/image:2"`),
		"extra_labels": json.RawMessage(`{"team": "hub"}`),
		"cpu_limit":    json.RawMessage(`null`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Pod.Image != "hub/image:2" {
		t.Errorf("image = %q, want the hub's", got.Pod.Image)
	}
	if len(got.ExtraLabels) != 1 || got.ExtraLabels["team"] != "hub" {
		t.Errorf("extra_labels = %v, want the hub's mapping alone (replaced, not merged)", got.ExtraLabels)
	}
	if !got.Pod.CPULimit.IsZero() {
		t.Errorf("cpu_limit = %v, want unset by null", got.Pod.CPULimit)
	}
	if names := envNamesOf(got.EnvironmentEntries()); strings.Join(names, ",") != "B,A" {
		t.Errorf("environment order = %v, want the base's B,A", names)
	}
	if base.Pod.Image != "base/image:1" || len(base.ExtraLabels) != 2 {
		t.Error("WithOptions changed its receiver")
	}

	ordered, err := base.WithOptions(map[string]json.RawMessage{"environment": json.RawMessage(`{"Z": "z", "C": "c", "M": "{username}"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if names := envNamesOf(ordered.EnvironmentEntries()); strings.Join(names, ",") != "Z,C,M" {
		t.Errorf("environment order = %v, want the hub's Z,C,M as written", names)
	}

	for name, opts := range map[string]map[string]json.RawMessage{
		"unknown option": {"imagee": json.RawMessage(`"x"`)},
		"bad value":      {"cpu_limit": json.RawMessage(`"lots"`)},
		"bad type":       {"extra_labels": json.RawMessage(`[1]`)},
	} {
		_, err := base.WithOptions(opts)
		var key string
		for k := range opts {
			key = k
		}
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v does not name %q", name, err, key)
		}
	}
}
