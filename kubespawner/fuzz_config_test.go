package kubespawner

import (
	"runtime"
	"testing"
)

// FuzzLoadConfig feeds Load and Resolve random documents and user
// options: they return or fail, never panic, hang or grow without bound.
func FuzzLoadConfig(f *testing.F) {
	for _, seed := range []string{
		userProfileYAML,
		"image: x\nport: 70000",
		"a: &a [x,x]\nb: [*a,*a]",
		"base: &b {image: x}\n<<: *b",
		"extra_labels: {'{username}': '{{ .Username }}'}",
		"{}", "[]", "null", "",
	} {
		f.Add(seed, "{value}", "")
	}
	f.Add(userProfileYAML, "1E999999999", "{{ .Username }}")
	f.Add(userProfileYAML, "-1G", "{username}")
	f.Fuzz(func(t *testing.T, doc, mem, env string) {
		cfg, err := Load([]byte(doc))
		if err != nil {
			return
		}
		opts := map[string]string{"mem--unlisted-choice": mem, "env--unlisted-choice": env}
		out, err := cfg.Resolve(t.Context(), opts)
		if err == nil {
			d := out.WithDefaults()
			_ = d.Validate()
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if m.HeapAlloc > 1<<30 {
			t.Fatalf("heap %d bytes after %q", m.HeapAlloc, doc)
		}
	})
}
