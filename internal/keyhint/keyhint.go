// Package keyhint turns "unknown field" errors of strict YAML and JSON
// decoding into errors that say where the key stands and which known key
// was probably meant: a misspelt key in a configuration file should cost
// a reader one glance, not a search through the docs.
package keyhint

import (
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	yaml "go.yaml.in/yaml/v3"
)

// JSONKeys are the JSON names of the fields of the struct types of vs
// (values or pointers), sorted and without repeats.
func JSONKeys(vs ...any) []string {
	var out []string
	for _, v := range vs {
		t := reflect.TypeOf(v)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Closest is the known key that key most probably means: the same name in
// snake_case, lower case, with "_" for "-", or without a "c.<Class>."
// prefix (pasted from a Python configuration); else the nearest by edit
// distance when it is near enough to be a typo (at most a third of the
// name's length, at least 1, and 2 from 5 characters on); else "".
func Closest(key string, known []string) string {
	alts := []string{snakeCase(key), strings.ToLower(key), strings.ReplaceAll(key, "-", "_")}
	if strings.HasPrefix(key, "c.") {
		if _, rest, ok := strings.Cut(key[2:], "."); ok {
			alts = append([]string{rest}, alts...)
		}
	}
	for _, alt := range alts {
		if alt != key && slices.Contains(known, alt) {
			return alt
		}
	}
	limit := max(1, len(key)/3)
	if len(key) >= 5 {
		limit = max(limit, 2)
	}
	best, bestD := "", limit+1
	for _, k := range known {
		if d := editDistance(key, k); d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	return best
}

// Line is the line of the first mapping key named key in the YAML (or
// JSON) document data, at any depth; 0 when there is none or data does
// not parse.
func Line(data []byte, key string) int {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return 0
	}
	return line(&doc, key, 0)
}

func line(n *yaml.Node, key string, depth int) int {
	if n == nil || depth > 100 {
		return 0
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
				return k.Line
			}
		}
	}
	for _, c := range n.Content {
		if l := line(c, key, depth+1); l > 0 {
			return l
		}
	}
	return 0
}

var unknownField = regexp.MustCompile(`unknown field "([^"]*)"`)

// Explain returns err unchanged unless it reports an unknown field; then
// an error naming the key's line in data, the key, and the known key
// probably meant (or every known key when none is near), which wraps err.
func Explain(data []byte, err error, known []string) error {
	if err == nil {
		return nil
	}
	m := unknownField.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	key := m[1]
	msg := "unknown key " + strconv.Quote(key)
	if l := Line(data, key); l > 0 {
		msg = "line " + strconv.Itoa(l) + ": " + msg
	}
	if s := Closest(key, known); s != "" {
		msg += ": did you mean " + strconv.Quote(s) + "?"
	} else {
		msg += " (known keys: " + strings.Join(known, ", ") + ")"
	}
	return &hintError{msg: msg, err: err}
}

type hintError struct {
	msg string
	err error
}

func (e *hintError) Error() string { return e.msg }
func (e *hintError) Unwrap() error { return e.err }

func snakeCase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// editDistance is the optimal string alignment distance: a swapped pair
// of letters, the commonest typo, counts one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
