package kubespawner

import (
	"errors"
	"strings"
	"testing"

	"github.com/spawnkit/spawnkit/naming"
)

const profileYAML = `
image: base:1
cpu_limit: 1
environment:
  KEEP: "yes"
  DROP: "soon"
profile_list:
- display_name: Small
  kubespawner_override:
    mem_limit: 1G
- display_name: "Data Science – GPU"
  default: true
  kubespawner_override:
    cpu_limit: 4
    environment:
      DROP: null
      GPU: "1"
  profile_options:
    image:
      display_name: Image
      choices:
        torch:
          display_name: PyTorch
          kubespawner_override:
            image: torch:2
        tf:
          display_name: TensorFlow
          kubespawner_override:
            image: tf:2
      unlisted_choice:
        enabled: true
        display_name: Other image
        validation_regex: "quay.io/jupyter/.+:.+"
        validation_message: "Must be a quay.io/jupyter image with a tag"
        kubespawner_override:
          image: "{value}"
    size:
      display_name: Size
      choices:
        s:
          display_name: Small
          kubespawner_override:
            mem_limit: 2G
        l:
          display_name: Large
          default: true
          kubespawner_override:
            mem_limit: 8G
`

func TestProfiles(t *testing.T) {
	cfg, err := Load([]byte(profileYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		options map[string]string
		image   string
		cpu     string
		mem     string
		env     map[string]string // "" value: must be absent
	}{
		{"default profile and default choices", nil, "torch:2", "4", "8589934592",
			map[string]string{"KEEP": "yes", "GPU": "1", "DROP": ""}},
		{"chosen option", map[string]string{"profile": "data-science-gpu", "image": "tf", "size": "s"}, "tf:2", "4", "2147483648", nil},
		{"unlisted choice", map[string]string{"profile": "data-science-gpu", "image--unlisted-choice": "quay.io/jupyter/r-notebook:2024"},
			"quay.io/jupyter/r-notebook:2024", "4", "8589934592", nil},
		{"other profile", map[string]string{"profile": "small"}, "base:1", "1", "1073741824",
			map[string]string{"KEEP": "yes", "DROP": "soon", "GPU": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cfg.Resolve(t.Context(), tc.options)
			if err != nil {
				t.Fatal(err)
			}
			if got.Pod.Image != tc.image || got.Pod.CPULimit.String() != tc.cpu || got.Pod.MemLimit.String() != tc.mem {
				t.Errorf("image %s cpu %s mem %s; want %s %s %s", got.Pod.Image, got.Pod.CPULimit.String(), got.Pod.MemLimit.String(), tc.image, tc.cpu, tc.mem)
			}
			for k, want := range tc.env {
				if v, ok := got.Environment[k]; want == "" && ok || want != "" && v != want {
					t.Errorf("environment[%s] = %q (present %v), want %q", k, v, ok, want)
				}
			}
		})
	}
	// The loaded config itself is unchanged by resolving.
	if cfg.Pod.Image != "base:1" || cfg.Environment["DROP"] != "soon" {
		t.Error("Resolve changed the config it was called on")
	}

	for _, tc := range []struct {
		name                   string
		options                map[string]string
		want                   string
		profile, option, value string
	}{
		{"unknown profile", map[string]string{"profile": "huge"}, "no such profile: huge; options include: small, data-science-gpu", "huge", "", ""},
		{"unknown choice", map[string]string{"image": "jax"}, `no choice "jax" for image; choices: torch, tf`, "data-science-gpu", "image", "jax"},
		{"failed validation", map[string]string{"image--unlisted-choice": "docker.io/evil:latest"}, "Must be a quay.io/jupyter image with a tag", "data-science-gpu", "image", "docker.io/evil:latest"},
		{"unlisted not enabled", map[string]string{"size--unlisted-choice": "xxl"}, "does not allow one", "data-science-gpu", "size", "xxl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cfg.Resolve(t.Context(), tc.options)
			var pe *ProfileError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a ProfileError containing %q", err, tc.want)
			} else if pe.Profile != tc.profile || pe.Option != tc.option || pe.Choice != tc.value {
				t.Errorf("ProfileError names profile %q option %q choice %q; want %q %q %q", pe.Profile, pe.Option, pe.Choice, tc.profile, tc.option, tc.value)
			}
		})
	}
}

func TestSlugify(t *testing.T) {
	for in, want := range map[string]string{"Data Science – GPU": "data-science-gpu", "Éléphant 2": "elephant-2", "  --x--  ": "x"} {
		if got := naming.Slugify(in); got != want {
			t.Errorf("Slugify(%q) = %q, want %q", in, got, want)
		}
	}
}
