package kubespawner

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestResolveRejectsBadUserOptions(t *testing.T) {
	for _, syntax := range []string{"kubespawner", "go"} {
		cfg, err := Load([]byte("template_syntax: " + syntax + "\n" + userProfileYAML))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			opts map[string]string
			key  string // a ConfigError key; "" for a ProfileError
		}{
			{"negative memory", map[string]string{"mem--unlisted-choice": "-1G"}, "mem_limit"},
			{"huge memory", map[string]string{"mem--unlisted-choice": "1E999999999"}, ""},
			{"not a quantity", map[string]string{"mem--unlisted-choice": "lots"}, ""},
			{"label from user", map[string]string{"lbl--unlisted-choice": "a b"}, "extra_labels"},
			{"NUL", map[string]string{"env--unlisted-choice": "a\x00"}, ""},
			{"invalid UTF-8", map[string]string{"env--unlisted-choice": "a\xff"}, ""},
			{"too long", map[string]string{"env--unlisted-choice": strings.Repeat("a", 5000)}, ""},
		} {
			t.Run(syntax+"/"+tc.name, func(t *testing.T) {
				_, err := cfg.Resolve(t.Context(), tc.opts)
				if err == nil {
					t.Fatal("accepted")
				}
				var ce *ConfigError
				if tc.key != "" && (!errors.As(err, &ce) || !slices.ContainsFunc(ce.Keys(), func(k string) bool { return strings.HasPrefix(k, tc.key) })) {
					t.Errorf("error %v does not name %s", err, tc.key)
				}
			})
		}
	}
}

func TestValidationRegex(t *testing.T) {
	if _, err := Load([]byte("image: x\nprofile_list: [{display_name: A, profile_options: {o: {unlisted_choice: {enabled: true, validation_regex: '[', kubespawner_override: {}}}}}]")); err == nil {
		t.Error("a bad validation_regex loaded")
	}
	cfg, err := Load([]byte("image: x\nprofile_list: [{display_name: A, profile_options: {o: {unlisted_choice: {enabled: true, validation_regex: 'b', kubespawner_override: {image: '{value}'}}}}}]"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProfileList[0].ProfileOptions[0].UnlistedChoice.re == nil {
		t.Error("validation_regex not compiled at load")
	}
	// re.match: anchored at the start only.
	for value, ok := range map[string]bool{"b": true, "bcd": true, "ab": false} {
		_, err := cfg.Resolve(t.Context(), map[string]string{"o--unlisted-choice": value})
		if (err == nil) != ok {
			t.Errorf("%q: err = %v, want match %v", value, err, ok)
		}
	}
}

func TestYAMLLimits(t *testing.T) {
	bomb := "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e]\n"
	for name, doc := range map[string]string{
		"alias bomb":      bomb,
		"too big":         "image: " + strings.Repeat("x", MaxConfigSize),
		"second document": "image: x\n---\nport: 1\n",
		"duplicate key":   "image: x\nimage: y\n",
		"bad merge":       "base: &b [1]\nx:\n  <<: *b\n",
	} {
		if _, err := yamlToJSON([]byte(doc)); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	got, err := yamlToJSON([]byte("base: &b {z: 1, a: 2}\nx:\n  y: 0\n  <<: *b\n  a: 3\nm:\n  <<: [{p: 1}, {p: 2, q: 2}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"base":{"z":1,"a":2},"x":{"y":0,"z":1,"a":3},"m":{"p":1,"q":2}}`; string(got) != want {
		t.Errorf("merge keys: %s, want %s", got, want)
	}
	cfg, err := Load([]byte("defaults: &d\n  image: x:1\n  port: 9000\n<<: *d\nport: 9001\n"))
	if err == nil {
		t.Logf("loaded %v %v", cfg.Pod.Image, cfg.Port)
	}
}

// TestLoadConfigItselfRejects: values that can only fail later are
// refused by Load itself, naming the option, not first by a start.
func TestLoadConfigItselfRejects(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{"image: ''", "image"},
		{"image: base:1\nport: 70000", "port"},
		{"image: base:1\nstart_timeout: -1", "start_timeout"},
		{"image: base:1\nextra_labels: {'bad key!': x}", "extra_labels"},
		{"image: base:1\nnamespace: Not_A_Namespace", "namespace"},
		{"image: base:1\nimage_pull_policy: Sometimes", "image_pull_policy"},
		{"image: base:1\nmem_limit: -1G", "mem_limit"},
	} {
		_, err := Load([]byte(tc.yaml))
		var ce *ConfigError
		if !errors.As(err, &ce) || !slices.ContainsFunc(ce.Keys(), func(k string) bool { return strings.HasPrefix(k, tc.key) }) {
			t.Errorf("Load(%q) = %v; want a ConfigError naming %s", tc.yaml, err, tc.key)
		}
	}
	// Without the option, KubeSpawner's default image applies.
	if _, err := Load([]byte("port: 8000")); err != nil {
		t.Errorf("a config without image: %v", err)
	}
}

const userProfileYAML = `
image: base:1
storage_pvc_ensure: true
storage_capacity: 1Gi
profile_list:
- display_name: Custom
  profile_options:
    mem:
      display_name: Memory
      choices:
        small: {display_name: Small, kubespawner_override: {mem_limit: 1G}}
      unlisted_choice:
        enabled: true
        kubespawner_override:
          mem_limit: "{value}"
    env:
      display_name: Env
      choices:
        none: {display_name: None}
      unlisted_choice:
        enabled: true
        validation_regex: "[a-z{}. $\"]+"
        kubespawner_override:
          environment: {CHOICE: "{value}"}
    lbl:
      display_name: Label
      choices:
        none: {display_name: None}
      unlisted_choice:
        enabled: true
        kubespawner_override:
          extra_labels: {choice: "x{value}"}
`
