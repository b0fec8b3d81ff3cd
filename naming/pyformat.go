package naming

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file is the part of Python's format mini-language a KubeSpawner
// template can use on its fields: conversions (!r, !s, !a) and format
// specs ([[fill]align][sign][#][0][width][,|_][.precision][type]), with
// the meaning Python 3.11's str.format gives them for the values
// KubeSpawner passes: userid is an int, every other field a str.

// pyField is one replacement field's conversion and format spec.
type pyField struct {
	conv  byte    // 0, 'r', 's' or 'a'
	spec  *pySpec // nil: no spec
	isInt bool    // the field's value is an int (before conversion)
}

// pySpec is a parsed format spec.
type pySpec struct {
	text          string
	fill          rune
	fillSpecified bool
	align         byte // 0 (default), '<', '>', '^' or '='
	sign          byte // 0, '+', '-' or ' '
	alt           bool
	zero          bool // the '0' flag, without an explicit fill
	width         int  // -1: none
	grouping      byte // 0, ',' or '_'
	precision     int  // -1: none
	typ           byte // 0 or the type character
}

// parseConversion parses what follows a field name: "", "!c", ":spec" or
// "!c:spec".
func parseConversion(rest string) (pyField, error) {
	var pf pyField
	if strings.HasPrefix(rest, "!") {
		if len(rest) < 2 {
			return pf, fmt.Errorf("end of string while looking for conversion specifier")
		}
		switch rest[1] {
		case 'r', 's', 'a':
			pf.conv = rest[1]
		default:
			return pf, fmt.Errorf("unknown conversion specifier %c", rest[1])
		}
		rest = rest[2:]
		if rest != "" && rest[0] != ':' {
			return pf, fmt.Errorf("expected ':' after conversion specifier")
		}
	}
	if strings.HasPrefix(rest, ":") {
		spec, err := parseSpec(rest[1:])
		if err != nil {
			return pf, err
		}
		pf.spec = spec
	}
	return pf, nil
}

func isAlign(r rune) bool { return r == '<' || r == '>' || r == '^' || r == '=' }

// parseSpec parses a format spec as CPython's
// parse_internal_render_format_spec does.
func parseSpec(text string) (*pySpec, error) {
	if text == "" {
		return nil, nil
	}
	if strings.ContainsAny(text, "{}") {
		return nil, fmt.Errorf("nested replacement fields in a format spec are not supported")
	}
	s := &pySpec{text: text, fill: ' ', width: -1, precision: -1}
	r := []rune(text)
	pos := 0
	switch {
	case len(r) >= 2 && isAlign(r[1]):
		s.fill, s.fillSpecified, s.align = r[0], true, byte(r[1])
		pos = 2
	case len(r) >= 1 && isAlign(r[0]):
		s.align = byte(r[0])
		pos = 1
	}
	if pos < len(r) && (r[pos] == '+' || r[pos] == '-' || r[pos] == ' ') {
		s.sign = byte(r[pos])
		pos++
	}
	if pos < len(r) && r[pos] == 'z' {
		return nil, fmt.Errorf("negative zero coercion (z) is only for floats")
	}
	if pos < len(r) && r[pos] == '#' {
		s.alt = true
		pos++
	}
	if !s.fillSpecified && pos < len(r) && r[pos] == '0' {
		s.zero = true
		s.fill = '0'
		pos++
	}
	digits := func() int {
		start := pos
		for pos < len(r) && r[pos] >= '0' && r[pos] <= '9' {
			pos++
		}
		if pos == start {
			return -1
		}
		n, err := strconv.Atoi(string(r[start:pos]))
		if err != nil || n > 1<<16 {
			return -2
		}
		return n
	}
	if s.width = digits(); s.width == -2 {
		return nil, fmt.Errorf("too many decimal digits in format string")
	}
	if pos < len(r) && r[pos] == ',' {
		s.grouping = ','
		pos++
	}
	if pos < len(r) && r[pos] == '_' {
		if s.grouping != 0 {
			return nil, fmt.Errorf("cannot specify both ',' and '_'")
		}
		s.grouping = '_'
		pos++
	}
	if pos < len(r) && r[pos] == ',' {
		return nil, fmt.Errorf("cannot specify both ',' and '_'")
	}
	if pos < len(r) && r[pos] == '.' {
		pos++
		if s.precision = digits(); s.precision == -1 {
			return nil, fmt.Errorf("format specifier missing precision")
		} else if s.precision == -2 {
			return nil, fmt.Errorf("too many decimal digits in format string")
		}
	}
	if len(r)-pos > 1 {
		return nil, fmt.Errorf("invalid format specifier %q", text)
	}
	if pos < len(r) {
		if r[pos] > unicode.MaxASCII {
			return nil, fmt.Errorf("unknown format code %q", r[pos])
		}
		s.typ = byte(r[pos])
	}
	return s, nil
}

// check reports a spec Python would refuse for the field's value, so that
// a template that parses always renders.
func (pf pyField) check() error {
	if pf.spec == nil {
		return nil
	}
	if pf.isInt && pf.conv == 0 {
		return pf.spec.checkInt()
	}
	return pf.spec.checkStr()
}

func (s *pySpec) checkStr() error {
	switch {
	case s.typ != 0 && s.typ != 's':
		return fmt.Errorf("unknown format code '%c' for a str field (fields other than userid are strings)", s.typ)
	case s.sign != 0:
		return fmt.Errorf("sign not allowed in string format specifier")
	case s.alt:
		return fmt.Errorf("alternate form (#) not allowed in string format specifier")
	case s.align == '=':
		return fmt.Errorf("'=' alignment not allowed in string format specifier")
	case s.grouping != 0:
		return fmt.Errorf("cannot specify '%c' with 's'", s.grouping)
	}
	return nil
}

func (s *pySpec) checkInt() error {
	switch s.typ {
	case 0, 'd', 'b', 'o', 'x', 'X':
	default:
		return fmt.Errorf("format code '%c' for the int field userid is not supported (use d, b, o, x or X)", s.typ)
	}
	if s.precision >= 0 {
		return fmt.Errorf("precision not allowed in integer format specifier")
	}
	if s.grouping == ',' && s.typ != 0 && s.typ != 'd' {
		return fmt.Errorf("cannot specify ',' with '%c'", s.typ)
	}
	return nil
}

// format renders a field's value (for an int field, its decimal form).
func (pf pyField) format(v string) (string, error) {
	isInt := pf.isInt
	switch pf.conv {
	case 'r':
		if !isInt {
			v = pyRepr(v, false)
		}
		isInt = false
	case 'a':
		if !isInt {
			v = pyRepr(v, true)
		}
		isInt = false
	case 's':
		isInt = false
	}
	if pf.spec == nil {
		return v, nil
	}
	if isInt {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", err
		}
		return pf.spec.formatInt(n), nil
	}
	return pf.spec.formatStr(v), nil
}

func (s *pySpec) formatStr(v string) string {
	if s.precision >= 0 && utf8.RuneCountInString(v) > s.precision {
		v = string([]rune(v)[:s.precision])
	}
	align := s.align
	if align == 0 {
		align = '<'
	}
	return s.pad("", v, align)
}

func (s *pySpec) formatInt(n int64) string {
	neg := n < 0
	u := uint64(n)
	if neg {
		u = uint64(-n)
	}
	base, prefix := 10, ""
	switch s.typ {
	case 'b':
		base, prefix = 2, "0b"
	case 'o':
		base, prefix = 8, "0o"
	case 'x':
		base, prefix = 16, "0x"
	case 'X':
		base, prefix = 16, "0X"
	}
	digits := strconv.FormatUint(u, base)
	if s.typ == 'X' {
		digits = strings.ToUpper(digits)
	}
	if !s.alt {
		prefix = ""
	}
	sign := ""
	switch {
	case neg:
		sign = "-"
	case s.sign == '+':
		sign = "+"
	case s.sign == ' ':
		sign = " "
	}
	head := sign + prefix
	align := s.align
	if align == 0 {
		align = '>'
		if s.zero {
			align = '='
		}
	}
	if s.grouping != 0 {
		every := 3
		if base != 10 {
			every = 4
		}
		minWidth := 0
		if align == '=' && s.fill == '0' && s.width > 0 {
			minWidth = s.width - utf8.RuneCountInString(head)
		}
		digits = group(digits, every, s.grouping, minWidth)
	}
	return s.pad(head, digits, align)
}

// group inserts sep every `every` digits from the right; with minWidth,
// leading zeros are added (and grouped) until the result is that long,
// as CPython pads zero-filled grouped numbers.
func group(digits string, every int, sep byte, minWidth int) string {
	join := func(d string) string {
		var b strings.Builder
		for i, c := range d {
			if i > 0 && (len(d)-i)%every == 0 {
				b.WriteByte(sep)
			}
			b.WriteRune(c)
		}
		return b.String()
	}
	out := join(digits)
	for len(out) < minWidth {
		digits = "0" + digits
		out = join(digits)
	}
	return out
}

// pad pads head+body to the spec's width; '=' pads between them.
func (s *pySpec) pad(head, body string, align byte) string {
	n := utf8.RuneCountInString(head) + utf8.RuneCountInString(body)
	if s.width <= n {
		return head + body
	}
	fill := strings.Repeat(string(s.fill), s.width-n)
	switch align {
	case '<':
		return head + body + fill
	case '^':
		left := (s.width - n) / 2
		return strings.Repeat(string(s.fill), left) + head + body + strings.Repeat(string(s.fill), s.width-n-left)
	case '=':
		return head + fill + body
	default:
		return fill + head + body
	}
}

// pyRepr is Python's repr of a str (ascii() with asciiOnly).
func pyRepr(s string, asciiOnly bool) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteRune(quote)
	for _, r := range s {
		switch {
		case r == quote || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f:
			b.WriteRune(r)
		case !asciiOnly && unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}
