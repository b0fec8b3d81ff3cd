package kubespawner

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestUnknownKeysSayWhereAndWhat: a misspelt or unknown key anywhere in a
// configuration (top level, a profile, its options, choices and unlisted
// choice, their overrides) is refused with its YAML line, its path and the
// name probably meant; every unknown key is reported at once; a pasted
// z2jh values block points to docs/z2jh.md. Keys inside option values
// (label names) are anyone's and pass.
func TestUnknownKeysSayWhereAndWhat(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // each must appear in the error
		not  []string // none may
	}{
		{"top-level typo", "image: x\nmem_gurantee: 1G\n",
			[]string{`line 2: mem_gurantee: unknown option "mem_gurantee": did you mean "mem_guarantee"?`, "docs/kubespawner-options.md"}, nil},
		{"swapped letters", "cpu_limti: 1\n", []string{`did you mean "cpu_limit"?`}, nil},
		{"z2jh camelCase", "memGuarantee: 1G\n", []string{`line 1: memGuarantee`, `did you mean "mem_guarantee"?`}, nil},
		{"pasted Python", "c.KubeSpawner.cpu_limit: 2\n", []string{`did you mean "cpu_limit"?`}, nil},
		{"far from everything", "image: x\nflux_capacitor: on\n", []string{`line 2: flux_capacitor: unknown option "flux_capacitor" (docs/kubespawner-options.md`}, []string{"did you mean"}},
		{"z2jh singleuser block", "singleuser:\n  image:\n    name: jupyter/base\n  memory:\n    guarantee: 1G\n",
			[]string{`line 1: singleuser: "singleuser" is a Zero to JupyterHub Helm value`, "docs/z2jh.md"}, []string{"did you mean"}},
		{"every key at once", "imag: x\nport: 8888\nstorage_capcity: 1Gi\n",
			[]string{`line 1: imag:`, `did you mean "image"?`, `line 3: storage_capcity:`, `did you mean "storage_capacity"?`}, nil},
		{"profile override", "profile_list:\n  - display_name: GPU\n    kubespawner_override:\n      cpu_limt: 2\n",
			[]string{`line 4: profile_list[0].kubespawner_override.cpu_limt: unknown option "cpu_limt": did you mean "cpu_limit"?`}, nil},
		{"profile key", "profile_list:\n  - display_name: GPU\n    kubespawner_overide: {}\n",
			[]string{`line 3: profile_list[0].kubespawner_overide: unknown key "kubespawner_overide": did you mean "kubespawner_override"?`}, nil},
		{"profile option and choice", `profile_list:
  - display_name: a
    profile_options:
      image:
        display_name: Image
        choices:
          big:
            display_name: Big
            kubespawner_override:
              image_pull_polcy: Always
        unlisted_choice:
          enabled: true
          kubespawner_overide: {}
`, []string{`line 10: profile_list[0].profile_options.image.choices.big.kubespawner_override.image_pull_polcy`, `did you mean "image_pull_policy"?`,
			`line 13: profile_list[0].profile_options.image.unlisted_choice.kubespawner_overide: unknown key`}, nil},
		{"JSON has lines too", "{\n  \"image\": \"x\",\n  \"mem_gurantee\": \"1G\"\n}\n", []string{`line 3: mem_gurantee`}, nil},
		{"merge key", "base: &b\n  cpu_limt: 1\n", []string{`line 1: base: unknown option "base"`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Load accepted:\n%s", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error has %q:\n%v", n, err)
				}
			}
		})
	}

	// Keys inside an option's value are names of the user's choosing.
	ok := "extra_labels:\n  mem_gurantee: x\nextra_resource_limits:\n  nvidia.com/gpu: \"1\"\nprofile_list:\n  - display_name: a\n    kubespawner_override:\n      extra_labels: {cpu_limt: y}\n"
	if _, err := Load([]byte(ok)); err != nil {
		t.Errorf("Load refused keys inside option values: %v", err)
	}
}

// TestUnknownOptionThroughWithOptions: a hub's options (JSON the service
// receives) name no line, which would point into spawnkit's own merge,
// but still the option probably meant.
func TestUnknownOptionThroughWithOptions(t *testing.T) {
	base, err := Load([]byte("image: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]json.RawMessage{"mem_gurantee": json.RawMessage(`"1G"`)}
	_, err = base.WithOptions(raw)
	if err == nil || !strings.Contains(err.Error(), `unknown option "mem_gurantee": did you mean "mem_guarantee"?`) || strings.Contains(err.Error(), "line ") {
		t.Errorf("WithOptions(mem_gurantee) = %v, want the suggestion and no line", err)
	}
	prof := map[string]json.RawMessage{"profile_list": json.RawMessage(`[{"display_name": "a", "kubespawner_override": {"cpu_limt": 1}}]`)}
	_, err = base.WithOptions(prof)
	if err == nil || !strings.Contains(err.Error(), `profile_list[0].kubespawner_override.cpu_limt: unknown option "cpu_limt": did you mean "cpu_limit"?`) || strings.Contains(err.Error(), "line ") {
		t.Errorf("WithOptions(profile typo) = %v, want the path, the suggestion and no line", err)
	}
}

func TestClosestKey(t *testing.T) {
	for key, want := range map[string]string{
		"mem_gurantee":        "mem_guarantee",
		"memGuarantee":        "mem_guarantee",
		"c.KubeSpawner.image": "image",
		"image-pull-policy":   "image_pull_policy",
		"imgae":               "image",
		"xyz":                 "",
		"start_timout":        "start_timeout",
	} {
		if got := closestKey(key, optionKeys); got != want {
			t.Errorf("closestKey(%q) = %q, want %q", key, got, want)
		}
	}
}
