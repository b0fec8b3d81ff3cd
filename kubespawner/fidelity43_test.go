package kubespawner

import "testing"

// TestValidationRegexPythonSemantics: validation_regex is matched as
// Python's re.match matches it: '$' outside multiline mode also matches
// before a final newline, \Z only at the end, (?m) and (?m:...) as in
// Python. Every expectation is Python's (re.match on Python 3).
func TestValidationRegexPythonSemantics(t *testing.T) {
	for _, c := range []struct {
		name, pattern, value string
		match                bool
	}{
		{"$ before a final newline", `^abc$`, "abc\n", true},
		{"$ not before two newlines", `^abc$`, "abc\n\n", false},
		{"$ at the end", `^abc$`, "abc", true},
		{"$ not before more", `^abc$`, "abcd", false},
		{"\\Z only at the end", `^abc\Z`, "abc\n", false},
		{"\\Z at the end", `^abc\Z`, "abc", true},
		{"(?m) $ before any newline", `(?m)^abc$`, "abc\ndef", true},
		{"$ not before an inner newline", `^abc$`, "abc\ndef", false},
		{"$ in a class is literal", `^a[$]`, "a$", true},
		{"escaped $ is literal", `^a\$`, "a$", true},
		{"escaped backslash then $", `^a\\$`, "a\\\n", true},
		{"] first in a class", `^a[]$]b`, "a$b", true},
		{"(?m:...) scoped", "(?m:a$)\nb", "a\nb", true},
		{"(?m:...) ends with its group", "(?m:a)$\nb", "a\nb", false},
		{"$ then the final newline", "a$\n", "a\n", true},
		{"$ in an alternative", `^(a|b$)`, "b\n", true},
		{"kubespawner docs example", `^jupyter/.+:.+$`, "jupyter/x:y\n", true},
		{"inner newlines, $ before the final one", `(?s).*x$`, "a\nx\n", true},
		{"inner newlines, not before two", `(?s).*x$`, "a\nx\n\n", false},
		{"(?-m:...) turns it off", `(?m)(?-m:a$)`, "a\nb", false},
		{"anchored at the start only", `b`, "ab", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			re, err := compileMatch(c.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := re.MatchString(c.value); got != c.match {
				t.Errorf("re.match(%q, %q): %v, want %v", c.pattern, c.value, got, c.match)
			}
		})
	}
	// Through a profile: the loaded pattern decides a user's value.
	cfg, err := Load([]byte("image: x\nprofile_list: [{display_name: A, profile_options: {o: {unlisted_choice: {enabled: true, validation_regex: '^abc$', kubespawner_override: {environment: {V: '{value}'}}}}}}]"))
	if err != nil {
		t.Fatal(err)
	}
	for value, ok := range map[string]bool{"abc\n": true, "abc\n\n": false} {
		if _, err := cfg.Resolve(t.Context(), map[string]string{"o--unlisted-choice": value}); (err == nil) != ok {
			t.Errorf("%q: err = %v, want a match %v", value, err, ok)
		}
	}
}
