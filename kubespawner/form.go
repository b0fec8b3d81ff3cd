package kubespawner

import (
	"strings"
)

// OptionsFromForm turns a spawn form's fields into user options, as
// KubeSpawner's options_from_form: "profile" and the chosen profile's
// "profile-option-<slug>--<option>[--unlisted-choice]" fields, first
// value of each, with the prefix removed. Other fields are dropped.
func OptionsFromForm(cfg Config, form map[string][]string) (map[string]string, error) {
	out := map[string]string{}
	profile := ""
	if v := form["profile"]; len(v) > 0 {
		profile = v[0]
	}
	if profile == "" {
		// _options_from_form: no profile (absent or empty) means no
		// options at all; the default profile applies.
		return out, nil
	}
	out["profile"] = profile
	prefix := "profile-option-" + profile + "--"
	for k, v := range form {
		if len(v) == 0 || !strings.HasPrefix(k, prefix) {
			continue
		}
		out[strings.TrimPrefix(k, prefix)] = v[0]
	}
	return out, nil
}
