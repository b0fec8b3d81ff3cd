package naming

import (
	"strings"
	"testing"
)

// TestPythonFormat checks conversions and format specs against what
// Python 3.11's str.format gives for KubeSpawner's values (userid an int,
// the other fields strings); the wants were printed by python3.
func TestPythonFormat(t *testing.T) {
	f := Fields{UserID: 42, Username: "gus", UnescapedUsername: "O'Brien \"x\"\tü\u00a0€𝄞"}
	for _, tc := range []struct{ text, want string }{
		{"{userid:06d}", "000042"},
		{"{userid}", "42"},
		{"{userid:d}", "42"},
		{"{userid:>8}", "      42"},
		{"{userid:<8}", "42      "},
		{"{userid:^9}", "   42    "},
		{"{userid:*^9}", "***42****"},
		{"{userid:+d}", "+42"},
		{"{userid: d}", " 42"},
		{"{userid:010,d}", "00,000,042"},
		{"{userid:08,d}", "0,000,042"},
		{"{userid:x}", "2a"},
		{"{userid:#x}", "0x2a"},
		{"{userid:#010X}", "0X0000002A"},
		{"{userid:_b}", "10_1010"},
		{"{userid:0=6}", "000042"},
		{"{username:>8}", "     gus"},
		{"{username:<8}", "gus     "},
		{"{username:^8}", "  gus   "},
		{"{username:.^8}", "..gus..."},
		{"{username:05}", "gus00"},
		{"{username:.2}", "gu"},
		{"{username:x<6.1s}", "gxxxxx"},
		{"{username:s}", "gus"},
		{"{username:08}", "gus00000"},
		{"{servername:_>3}", "___"},
		{"{unescaped_username:>30}", "              O'Brien \"x\"\tü\u00a0€𝄞"},
		{"{username:😀^7}", "😀😀gus😀😀"},
		{"{unescaped_username!r}", `'O\'Brien "x"\tü\xa0€𝄞'`},
		{"{unescaped_username!a}", `'O\'Brien "x"\t\xfc\xa0\u20ac\U0001d11e'`},
		{"{unescaped_username!s}", "O'Brien \"x\"\tü\u00a0€𝄞"},
		{"{userid!r}", "42"},
		{"{userid!r:>5}", "   42"},
		{"{username!r:*<9}", "'gus'****"},
		{"{userid!s:05}", "42000"},
		{"[{username:>8}]", "[     gus]"},
		{"{{literal}}-{username}", "{literal}-gus"},
	} {
		tmpl, err := Parse(tc.text, KubeSpawner)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.text, err)
			continue
		}
		got, err := tmpl.Execute(f)
		if err != nil || got != tc.want {
			t.Errorf("%q = %q, %v; want %q", tc.text, got, err, tc.want)
		}
	}
	neg, _ := Parse("{userid:+05d}", KubeSpawner)
	if got, _ := neg.Execute(Fields{UserID: -7}); got != "-0007" {
		t.Errorf("{userid:+05d} of -7 = %q, want -0007", got)
	}
	// What Python refuses is refused when the template is parsed.
	for text, want := range map[string]string{
		"{username:+}":    "sign not allowed",
		"{username:=5}":   "'=' alignment not allowed",
		"{username:#}":    "alternate form",
		"{username:,}":    "cannot specify ','",
		"{userid:.2}":     "precision not allowed",
		"{username:d}":    "unknown format code 'd'",
		"{userid:,x}":     "cannot specify ','",
		"{username!x}":    "unknown conversion specifier x",
		"{username!r5}":   "expected ':' after conversion",
		"{username:{x}}":  "nested",
		"{username.x:>3}": "attributes",
	} {
		_, err := Parse(text, KubeSpawner)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", text, err, want)
		}
	}
}
