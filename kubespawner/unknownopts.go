package kubespawner

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/spawnkit/spawnkit/internal/keyhint"
)

// optionsDoc is where every option is listed; errors about an unknown one
// point there.
const optionsDoc = "docs/kubespawner-options.md"

// z2jhValues are the top-level keys of Zero to JupyterHub's Helm values: a
// configuration holding one was pasted from a values file, which the
// chart's hub turns into c.KubeSpawner settings; spawnkit takes those
// settings (docs/z2jh.md), not the values.
var z2jhValues = map[string]bool{
	"singleuser": true, "hub": true, "proxy": true, "scheduling": true, "prePuller": true,
	"ingress": true, "cull": true, "rbac": true, "debug": true, "global": true,
	"fullnameOverride": true, "nameOverride": true, "imagePullSecret": true,
	"imagePullSecrets": true, "custom": true, "cluster": true,
}

// jsonKeys are the JSON names of T's fields.
func jsonKeys[T any]() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			m[name] = true
		}
	}
	return m
}

var (
	profileKeys    = jsonKeys[Profile]()
	optionKeysOf   = jsonKeys[ProfileOption]()
	choiceJSONKeys = jsonKeys[Choice]()
	unlistedKeys   = jsonKeys[UnlistedChoice]()
)

// unknownKeyError is one misspelt or unknown key: where it stands (line 0
// when the document was not the user's own text), its path, and the
// message.
type unknownKeyError struct {
	line int
	path string
	msg  string
}

// checkKeys finds every unknown key of a configuration document, at the
// top level and in the profile list's overrides, with the line it stands
// on and the closest known name. withLines is false for documents spawnkit
// assembled (merged overrides), whose lines mean nothing to the user. The
// keys of option values (a label's name, a resource's) are not checked:
// any name is valid there.
func checkKeys(data []byte, withLines bool) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil // yamlToJSON has reported it, or there is nothing
	}
	w := keyWalker{}
	w.mapping(resolve(doc.Content[0]), "", optionKeys, w.topLevel)
	if len(w.errs) == 0 {
		return nil
	}
	msgs := make([]string, len(w.errs))
	for i, e := range w.errs {
		where := e.path
		if withLines && e.line > 0 {
			where = "line " + strconv.Itoa(e.line) + ": " + e.path
		}
		msgs[i] = where + ": " + e.msg
	}
	return errors.New(strings.Join(msgs, "; "))
}

type keyWalker struct{ errs []unknownKeyError }

// mapping checks n's keys against known and calls child for each known
// key's value.
func (w *keyWalker) mapping(n *yaml.Node, path string, known map[string]bool, child func(key, path string, v *yaml.Node)) {
	if n == nil || n.Kind != yaml.MappingNode {
		return // the decoder reports a wrong shape with its type
	}
	entries, err := (&converter{budget: maxAliasNodes + countNodes(n)}).entries(n, 0)
	if err != nil {
		return // yamlToJSON reports it
	}
	for _, e := range entries {
		p := e.key
		if path != "" {
			p = path + "." + e.key
		}
		if !known[e.key] {
			w.errs = append(w.errs, unknownKeyError{line: e.line, path: p, msg: unknownKeyMsg(e.key, path == "", known)})
			continue
		}
		if child != nil {
			child(e.key, p, resolve(e.value))
		}
	}
}

// eachValue checks each value of the mapping n (profile options by name,
// choices by name) as a mapping of known keys.
func (w *keyWalker) eachValue(n *yaml.Node, path string, known map[string]bool, child func(key, path string, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		return
	}
	entries, err := (&converter{budget: maxAliasNodes + countNodes(n)}).entries(n, 0)
	if err != nil {
		return
	}
	for _, e := range entries {
		w.mapping(resolve(e.value), path+"."+e.key, known, child)
	}
}

func (w *keyWalker) topLevel(key, path string, v *yaml.Node) {
	if key != "profile_list" || v.Kind != yaml.SequenceNode {
		return
	}
	for i, item := range v.Content {
		w.mapping(resolve(item), fmt.Sprintf("profile_list[%d]", i), profileKeys, w.profile)
	}
}

func (w *keyWalker) profile(key, path string, v *yaml.Node) {
	switch key {
	case "kubespawner_override":
		w.mapping(v, path, optionKeys, nil)
	case "profile_options":
		w.eachValue(v, path, optionKeysOf, w.profileOption)
	}
}

func (w *keyWalker) profileOption(key, path string, v *yaml.Node) {
	switch key {
	case "choices":
		w.eachValue(v, path, choiceJSONKeys, w.override)
	case "unlisted_choice":
		w.mapping(v, path, unlistedKeys, w.override)
	}
}

func (w *keyWalker) override(key, path string, v *yaml.Node) {
	if key == "kubespawner_override" {
		w.mapping(v, path, optionKeys, nil)
	}
}

// unknownKeyMsg says why key is unknown and what was probably meant.
func unknownKeyMsg(key string, topLevel bool, known map[string]bool) string {
	if topLevel && z2jhValues[key] {
		return fmt.Sprintf("%q is a Zero to JupyterHub Helm value, not a KubeSpawner option: keep the chart's values in the chart and let the hub send the configuration it makes of them, or write the c.KubeSpawner options it sets (docs/z2jh.md)", key)
	}
	if !isOptionSet(known) {
		msg := "unknown key " + strconv.Quote(key)
		if s := closestKey(key, known); s != "" {
			return msg + ": did you mean " + strconv.Quote(s) + "?"
		}
		return msg + " (known here: " + strings.Join(sortedKeys(known), ", ") + ")"
	}
	return unknownOptionMsg(key)
}

// unknownOptionMsg says that key is no option, with the option probably
// meant, and where every option is listed.
func unknownOptionMsg(key string) string {
	msg := "unknown option " + strconv.Quote(key)
	if s := closestKey(key, optionKeys); s != "" {
		msg += ": did you mean " + strconv.Quote(s) + "?"
	}
	return msg + " (" + optionsDoc + " lists every option)"
}

// isOptionSet reports whether known is the option list (not a profile's
// own keys), which is too long to print and is documented.
func isOptionSet(known map[string]bool) bool {
	return reflect.ValueOf(known).Pointer() == reflect.ValueOf(optionKeys).Pointer()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// closestKey is the known key that key most probably means, or ""
// (keyhint.Closest).
func closestKey(key string, known map[string]bool) string {
	return keyhint.Closest(key, sortedKeys(known))
}

// optionKeys are the option names Load accepts: Config's own
// (its JSON names), the pod's, the hub's, environment, and the names
// kubespawnerCompat renames or ignores.
var optionKeys = func() map[string]bool {
	m := map[string]bool{"environment": true}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			m[name] = true
		}
	}
	for _, list := range [][]string{hubOptions, podOptionKeys, slices.Collect(maps.Keys(deprecatedOptions)), slices.Collect(maps.Keys(noopOptions))} {
		for _, k := range list {
			m[k] = true
		}
	}
	return m
}()

// isOptionKey reports whether k names an option Load accepts.
func isOptionKey(k string) bool { return optionKeys[k] }
