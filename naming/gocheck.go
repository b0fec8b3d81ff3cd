package naming

import (
	"fmt"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
)

// maxRepeat bounds the output of the sprig functions that repeat text
// (repeat, indent, nindent), so a template cannot allocate without limit.
const maxRepeat = 1 << 16

// allowedBuiltins are text/template's builtins a name template may call;
// call (which invokes a func-valued datum) is left out.
var allowedBuiltins = []string{
	"and", "or", "not", "len", "index", "slice", "print", "printf", "println",
	"eq", "ne", "lt", "le", "gt", "ge", "html", "js", "urlquery",
}

// goRefs walks a Go template's parse tree, checks that it reads only
// top-level fields among keys (.Username) and calls only hermetic
// functions, and returns the snake_case keys it reads. Variables, the
// bare dot, field chains (.A.B), range, with, template, define and block
// are rejected here, at parse time, with the construct and its position:
// they could reach data beyond the documented fields.
func goRefs(t *template.Template, keys []fieldKey, syntax Syntax) ([]string, error) {
	if len(t.Templates()) > 1 {
		return nil, fmt.Errorf("{{define}} and {{block}} are not allowed: a name template is one template")
	}
	var refs []string
	var err error
	tree := t.Tree
	fail := func(n parse.Node, construct string) {
		if err != nil {
			return
		}
		loc, _ := tree.ErrorContext(n)
		err = fmt.Errorf("%s at %s is not allowed: a name template may use only the fields %s and hermetic functions", construct, loc, knownFields(keys, syntax))
	}
	funcs := hermeticFuncs()
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case nil:
		case *parse.ListNode:
			if n != nil {
				for _, c := range n.Nodes {
					walk(c)
				}
			}
		case *parse.TextNode, *parse.CommentNode, *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode:
		case *parse.ActionNode:
			walk(n.Pipe)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			if len(n.Decl) > 0 {
				fail(n, "variable "+n.Decl[0].String())
				return
			}
			for _, c := range n.Cmds {
				walk(c)
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				walk(a)
			}
		case *parse.IdentifierNode:
			if _, ok := funcs[n.Ident]; !ok && !slices.Contains(allowedBuiltins, n.Ident) {
				fail(n, "function "+n.Ident)
			}
		case *parse.FieldNode:
			if len(n.Ident) != 1 {
				fail(n, "field chain "+n.String())
				return
			}
			i := slices.IndexFunc(keys, func(k fieldKey) bool { return k.goName == n.Ident[0] })
			if i < 0 {
				if err == nil {
					err = fmt.Errorf("unknown field .%s; known fields: %s", n.Ident[0], knownFields(keys, syntax))
				}
				return
			}
			if !slices.Contains(refs, keys[i].snake) {
				refs = append(refs, keys[i].snake)
			}
		case *parse.IfNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.VariableNode:
			fail(n, "variable "+n.String())
		case *parse.DotNode:
			fail(n, "the dot {{.}} (the whole data)")
		case *parse.ChainNode:
			fail(n, "field access on an expression "+n.String())
		case *parse.RangeNode:
			fail(n, "{{range}}")
		case *parse.WithNode:
			fail(n, "{{with}}")
		case *parse.TemplateNode:
			fail(n, "{{template}}")
		case *parse.BreakNode:
			fail(n, "{{break}}")
		case *parse.ContinueNode:
			fail(n, "{{continue}}")
		default:
			fail(n, fmt.Sprintf("%T %s", n, n))
		}
	}
	walk(tree.Root)
	if err != nil {
		return nil, err
	}
	return refs, nil
}

// boundFuncs replaces the sprig functions whose output size is chosen by
// an argument with bounded versions, and drops those that build lists
// (until, untilStep, seq): names have no use for them and a template
// cannot iterate (range is rejected).
func boundFuncs(funcs template.FuncMap) {
	for _, name := range []string{"until", "untilStep", "seq"} {
		delete(funcs, name)
	}
	check := func(fn string, count, size int) error {
		if count < 0 || count > maxRepeat || count*max(size, 1) > maxRepeat {
			return fmt.Errorf("%s: %d copies of %d bytes exceed the limit of %d bytes", fn, count, size, maxRepeat)
		}
		return nil
	}
	funcs["repeat"] = func(count int, str string) (string, error) {
		if err := check("repeat", count, len(str)); err != nil {
			return "", err
		}
		return strings.Repeat(str, count), nil
	}
	indent := func(spaces int, v string) (string, error) {
		if err := check("indent", spaces, strings.Count(v, "\n")+1); err != nil {
			return "", err
		}
		pad := strings.Repeat(" ", spaces)
		return pad + strings.ReplaceAll(v, "\n", "\n"+pad), nil
	}
	funcs["indent"] = indent
	funcs["nindent"] = func(spaces int, v string) (string, error) {
		s, err := indent(spaces, v)
		return "\n" + s, err
	}
}
