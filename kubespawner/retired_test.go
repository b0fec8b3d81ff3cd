package kubespawner

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRetiredNamespacesValidated: every retired_namespaces entry is a
// namespace's name or a template that parses; an empty one (which would
// widen the watch to every namespace) or a name no namespace can have
// is refused at load, naming the entry.
func TestRetiredNamespacesValidated(t *testing.T) {
	for _, bad := range []string{"", "Upper", "has_underscore", strings.Repeat("x", 64), "{username", "{nosuchfield}"} {
		data, _ := json.Marshal(map[string]any{"image": "lab", "retired_namespaces": []string{"ok", bad}})
		_, err := Load(data)
		if err == nil || !IsInvalidConfig(err) || !strings.Contains(err.Error(), "retired_namespaces[1]") {
			t.Errorf("retired_namespaces %q: Load = %v, want a ConfigError naming retired_namespaces[1]", bad, err)
		}
	}
	data, _ := json.Marshal(map[string]any{"image": "lab", "retired_namespaces": []string{"jhub-old", "{hubnamespace}-{username}"}})
	cfg, err := Load(data)
	if err != nil {
		t.Fatalf("valid retired_namespaces: %v", err)
	}
	if len(cfg.RetiredNamespaces) != 2 {
		t.Errorf("retired_namespaces loaded as %q", cfg.RetiredNamespaces)
	}
}
