package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// The options form follows KubeSpawner's form.html: a radio "profile" per
// profile (the default one checked), a select
// "profile-option-<slug>--<option>" per profile option (the default choice
// selected; "unlisted-choice" when the option allows a value of one's
// own) and a text input "profile-option-<slug>--<option>--unlisted-choice"
// for that value. It has no script: an unlisted value that is filled in
// wins over the select, as it does in Config.Resolve.
var formTemplate = template.Must(template.New("form").Parse(`<div class="form-group" id="kubespawner-profiles-list">
{{- range .}}
  <div class="profile">
    <label for="profile-item-{{.Slug}}">
      <input type="radio" name="profile" id="profile-item-{{.Slug}}" value="{{.Slug}}"{{if .Default}} checked{{end}}>
      <strong>{{.DisplayName}}</strong>
    </label>
    {{- if .Description}}
    <p>{{.Description}}</p>
    {{- end}}
    {{- $slug := .Slug}}
    {{- range .ProfileOptions}}
    <div class="option">
      <label for="profile-option-{{$slug}}--{{.Name}}">{{.DisplayName}}</label>
      <select name="profile-option-{{$slug}}--{{.Name}}" id="profile-option-{{$slug}}--{{.Name}}" class="form-control">
        {{- range .Choices}}
        <option value="{{.Key}}"{{if .Default}} selected{{end}}>{{.DisplayName}}</option>
        {{- end}}
        {{- if .Unlisted}}
        <option value="unlisted-choice">{{.Unlisted.InChoices}}</option>
        {{- end}}
      </select>
      {{- if .Unlisted}}
      <label for="profile-option-{{$slug}}--{{.Name}}--unlisted-choice">{{.Unlisted.DisplayName}}</label>
      <input type="text" name="profile-option-{{$slug}}--{{.Name}}--unlisted-choice" id="profile-option-{{$slug}}--{{.Name}}--unlisted-choice" class="form-control"
        {{- if .Unlisted.Pattern}} pattern="{{.Unlisted.Pattern}}"{{end}}{{if .Unlisted.Title}} title="{{.Unlisted.Title}}"{{end}}>
      {{- end}}
    </div>
    {{- end}}
  </div>
{{- end}}
</div>
`))

// formProfile is a profile as the form shows it.
type formProfile struct {
	Slug, DisplayName, Description string
	Default                        bool
	ProfileOptions                 []formOption
}

type formOption struct {
	Name, DisplayName string
	Choices           []formChoice
	Unlisted          *formUnlisted // nil: no value of one's own
}

type formChoice struct {
	Key, DisplayName string
	Default          bool
}

type formUnlisted struct {
	DisplayName, InChoices string
	Pattern, Title         string
}

// formProfiles fills in what KubeSpawner's profile initialisation does:
// a slug from the display name, the first profile default when none is,
// the first choice default when none is.
func formProfiles(profiles []kubespawner.Profile) []formProfile {
	out := make([]formProfile, 0, len(profiles))
	anyDefault := false
	for _, p := range profiles {
		fp := formProfile{Slug: p.Slug, DisplayName: p.DisplayName, Description: p.Description, Default: p.Default && !anyDefault}
		anyDefault = anyDefault || p.Default
		if fp.Slug == "" {
			fp.Slug = naming.Slugify(p.DisplayName)
		}
		for _, o := range p.ProfileOptions {
			fo := formOption{Name: o.Name, DisplayName: o.DisplayName}
			choiceDefault := false
			for _, c := range o.Choices {
				fo.Choices = append(fo.Choices, formChoice{Key: c.Key, DisplayName: c.DisplayName, Default: c.Default && !choiceDefault})
				choiceDefault = choiceDefault || c.Default
			}
			if !choiceDefault && len(fo.Choices) > 0 {
				fo.Choices[0].Default = true
			}
			if u := o.UnlistedChoice; u != nil && u.Enabled {
				fu := &formUnlisted{DisplayName: u.DisplayName, InChoices: u.DisplayNameInChoices,
					Pattern: u.ValidationRegex, Title: u.ValidationMessage}
				if fu.InChoices == "" {
					fu.InChoices = "Other..."
				}
				if fu.DisplayName == "" {
					fu.DisplayName = fu.InChoices
				}
				fo.Unlisted = fu
			}
			fp.ProfileOptions = append(fp.ProfileOptions, fo)
		}
		out = append(out, fp)
	}
	if !anyDefault && len(out) > 0 {
		out[0].Default = true
	}
	return out
}

// renderForm renders the form; no profiles render nothing (JupyterHub
// then shows no form).
func renderForm(profiles []kubespawner.Profile) ([]byte, error) {
	if len(profiles) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	if err := formTemplate.Execute(&b, formProfiles(profiles)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (a *api) optionsForm(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Config json.RawMessage `json:"config"`
	}
	if r.Method == http.MethodPost {
		if err := readJSON(w, r, &body); err != nil {
			return err
		}
	}
	profiles, err := a.b.Profiles(r.Context(), body.Config)
	if err != nil {
		return profilesError(err)
	}
	html, err := renderForm(profiles)
	if err != nil {
		return fmt.Errorf("rendering the options form: %w", err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(html)
	return nil
}

// optionsFromForm is KubeSpawner's options_from_form: the profile is the
// first "profile" value (the first profile's slug when there is none),
// and every field "profile-option-<that slug>--<key>" gives user option
// <key> its first value; other fields are dropped.
func optionsFromForm(form map[string][]string, profiles []kubespawner.Profile) map[string]string {
	out := map[string]string{}
	slug := ""
	if v := form["profile"]; len(v) > 0 {
		slug = v[0]
	} else if fp := formProfiles(profiles); len(fp) > 0 {
		slug = fp[0].Slug
	} else {
		return out
	}
	out["profile"] = slug
	prefix := "profile-option-" + slug + "--"
	for k, v := range form {
		if key, ok := strings.CutPrefix(k, prefix); ok && len(v) > 0 {
			out[key] = v[0]
		}
	}
	return out
}

func (a *api) optionsFromForm(w http.ResponseWriter, r *http.Request) error {
	var raw map[string]json.RawMessage
	if err := readJSON(w, r, &raw); err != nil {
		return err
	}
	// {"form_data": {...}, "config": {...}}: the form of a hub that sends
	// its own configuration (a field named form_data is a list, never an
	// object).
	var config json.RawMessage
	if fd := bytes.TrimSpace(raw["form_data"]); len(fd) > 0 && fd[0] == '{' {
		config = raw["config"]
		raw = nil
		if err := json.Unmarshal(fd, &raw); err != nil {
			return errBadRequest(reasonBadRequest, fmt.Errorf("form_data: %w", err))
		}
	}
	form := make(map[string][]string, len(raw))
	for k, v := range raw {
		var values []string
		if err := json.Unmarshal(v, &values); err != nil || values == nil {
			return errBadRequest(reasonBadRequest, fmt.Errorf("form field %q is %s: want a list of strings", k, v))
		}
		form[k] = values
	}
	var profiles []kubespawner.Profile
	if len(form["profile"]) == 0 {
		var err error
		if profiles, err = a.b.Profiles(r.Context(), config); err != nil {
			return profilesError(err)
		}
	}
	writeJSON(w, http.StatusOK, optionsFromForm(form, profiles))
	return nil
}

// profilesError keeps a 4xx (a bad hub configuration) as it is.
func profilesError(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	return fmt.Errorf("building the profile list: %w", err)
}
