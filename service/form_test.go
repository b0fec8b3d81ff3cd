package service

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/kubespawner"
)

// testProfiles is a profile list as kubespawner.Load reads it.
func testProfiles(t *testing.T) []kubespawner.Profile {
	t.Helper()
	cfg, err := kubespawner.Load([]byte(`
profile_list:
  - display_name: "Small <CPU> & co"
    description: "2 cores <b>only</b>"
  - display_name: GPU
    slug: gpu
    default: true
    profile_options:
      image:
        display_name: Image
        choices:
          scipy: {display_name: SciPy}
          pangeo: {display_name: Pangeo, default: true}
        unlisted_choice:
          enabled: true
          display_name: "Your image"
          validation_regex: "^quay.io/.+"
          validation_message: "Must be on quay.io"
      size:
        display_name: Size
        choices:
          s: {display_name: S}
          l: {display_name: L}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.ProfileList
}

func TestRenderForm(t *testing.T) {
	html, err := renderForm(testProfiles(t))
	if err != nil {
		t.Fatal(err)
	}
	out := string(html)
	for _, want := range []string{
		// Radios: slug generated from the display name; the default checked.
		`<input type="radio" name="profile" id="profile-item-small-cpu-co" value="small-cpu-co">`,
		`<input type="radio" name="profile" id="profile-item-gpu" value="gpu" checked>`,
		// Escaped text.
		`Small &lt;CPU&gt; &amp; co`,
		`2 cores &lt;b&gt;only&lt;/b&gt;`,
		// Selects in order, default choice selected, first when none is.
		`<select name="profile-option-gpu--image"`,
		`<option value="scipy">SciPy</option>`,
		`<option value="pangeo" selected>Pangeo</option>`,
		`<option value="unlisted-choice">Other...</option>`,
		`<select name="profile-option-gpu--size"`,
		`<option value="s" selected>S</option>`,
		// The unlisted choice's input, with its validation.
		`name="profile-option-gpu--image--unlisted-choice"`,
		`pattern="^quay.io/.&#43;"`,
		`title="Must be on quay.io"`,
		`Your image</label>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("form lacks %s\n%s", want, out)
		}
	}
	if strings.Index(out, "profile-option-gpu--image\"") > strings.Index(out, "profile-option-gpu--size\"") {
		t.Error("options out of their configured order")
	}
	if strings.Contains(out, "<b>") || strings.Contains(out, "<CPU>") {
		t.Error("unescaped text in the form")
	}
	if strings.Contains(out, "--size--unlisted-choice") {
		t.Error("an unlisted-choice input for an option without one")
	}
	if html, err := renderForm(nil); err != nil || len(html) != 0 {
		t.Errorf("no profiles: %q, %v; want nothing", html, err)
	}
}

func TestRenderFormFirstProfileDefault(t *testing.T) {
	html, _ := renderForm([]kubespawner.Profile{{DisplayName: "A"}, {DisplayName: "B"}})
	if !strings.Contains(string(html), `value="a" checked`) || strings.Contains(string(html), `value="b" checked`) {
		t.Errorf("want the first profile checked when none is default:\n%s", html)
	}
}

func TestOptionsFromForm(t *testing.T) {
	profiles := testProfiles(t)
	cases := []struct {
		name     string
		form     map[string][]string
		profiles []kubespawner.Profile
		want     map[string]string
	}{
		{"chosen profile's options only", map[string][]string{
			"profile":                   {"gpu"},
			"profile-option-gpu--image": {"scipy"},
			"profile-option-gpu--image--unlisted-choice": {"quay.io/me/img"},
			"profile-option-small-cpu-co--image":         {"other"},
			"unrelated":                                  {"x"},
		}, profiles, map[string]string{"profile": "gpu", "image": "scipy", "image--unlisted-choice": "quay.io/me/img"}},
		{"first values", map[string][]string{
			"profile": {"gpu", "small-cpu-co"}, "profile-option-gpu--size": {"l", "s"},
		}, profiles, map[string]string{"profile": "gpu", "size": "l"}},
		{"no profile: the first profile", map[string][]string{
			"profile-option-small-cpu-co--x": {"1"}, "profile-option-gpu--size": {"l"},
		}, profiles, map[string]string{"profile": "small-cpu-co", "x": "1"}},
		{"empty lists skipped", map[string][]string{
			"profile": {}, "profile-option-small-cpu-co--x": {},
		}, profiles, map[string]string{"profile": "small-cpu-co"}},
		{"no profile list", map[string][]string{"a": {"b"}}, nil, map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := optionsFromForm(c.form, c.profiles); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestOptionsFormHTTP(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	resp, data := ta.do(t, "GET", "/v1/users/alice/options-form", "")
	if resp.StatusCode != http.StatusOK || len(data) != 0 {
		t.Errorf("no profile list: %d %q, want 200 and an empty body", resp.StatusCode, data)
	}
	ta.fake.profiles = testProfiles(t)
	resp, data = ta.do(t, "GET", "/v1/users/alice/options-form", "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(data), `name="profile"`) {
		t.Errorf("form: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	resp, data = ta.do(t, "POST", "/v1/users/alice/options-from-form",
		`{"profile": ["gpu"], "profile-option-gpu--image": ["pangeo"], "profile-option-gpu--image--unlisted-choice": [""]}`)
	var got map[string]string
	if err := json.Unmarshal(data, &got); resp.StatusCode != http.StatusOK || err != nil ||
		!reflect.DeepEqual(got, map[string]string{"profile": "gpu", "image": "pangeo", "image--unlisted-choice": ""}) {
		t.Errorf("from form: %d %s", resp.StatusCode, data)
	}
	// The result is what a spawn request takes.
	resp, data = ta.do(t, "POST", "/v1/users/alice/server", `{"user_options": `+string(data)+`}`)
	if resp.StatusCode != http.StatusAccepted || ta.fake.spawns[0].UserOptions["image"] != "pangeo" {
		t.Errorf("spawn with the form's options: %d %s", resp.StatusCode, data)
	}
}
