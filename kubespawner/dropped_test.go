package kubespawner

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAllowedDroppedFieldsCover(t *testing.T) {
	for _, tc := range []struct {
		f, allowed string
		want       bool
	}{
		{"spec.hostUsers", "*", true},
		{"spec.hostUsers", "spec.hostUsers", true},
		{"spec.hostUsers", "spec.host", false},
		{"spec.hostUsers", "spec", true},
		{"spec.containers[notebook].resources.limits.cpu", "spec.containers[notebook].resources", true},
		{"spec.containers[notebook].resources.limits.cpu", "spec.containers", true},
		{"spec.containers[notebook].resizePolicy", "spec.containers[note", false},
		{"spec.tolerations[0]", "spec.tolerations[1]", false},
	} {
		if got := DroppedAllowed(tc.f, tc.allowed); got != tc.want {
			t.Errorf("covered(%q, %q) = %v, want %v", tc.f, tc.allowed, got, tc.want)
		}
	}
	for _, bad := range []string{"", "hostUsers", "metadata.name", "metadata", "spec-hostUsers"} {
		data, _ := json.Marshal(map[string]any{"image": "lab", "allowed_dropped_fields": []string{bad}})
		if _, err := Load(data); err == nil || !strings.Contains(err.Error(), "allowed_dropped_fields[0]") {
			t.Errorf("allowed_dropped_fields %q: Load = %v, want an error naming it", bad, err)
		}
	}
	data, _ := json.Marshal(map[string]any{"image": "lab", "allowed_dropped_fields": []string{
		"*", "spec", "spec.hostUsers", "spec.containers[notebook].resources", "metadata.labels.hub.jupyter.org/network-access-hub", "metadata.annotations"}})
	if _, err := Load(data); err != nil {
		t.Errorf("Load of valid allowed_dropped_fields: %v", err)
	}
}
