package envconf

import (
	"fmt"
	"strings"
)

// usageWidth is the column a help text's lines end before.
const usageWidth = 80

// Usage is a binary's help text: what it is, then each variable of vars
// with its default, and what it does below it, wrapped. It says the
// same as the binary's table in docs/configuration.md (Markdown), as
// plain text (Plain).
func Usage(binary, about string, vars []Var) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\nConfigured by the environment only (docs/configuration.md has the same table):\n", binary, about)
	for _, v := range vars {
		head := "  " + v.Name
		switch def := Plain(v.DocDefault()); {
		case v.Required:
			head += " [required]"
		case def != "":
			head += " [" + def + "]"
		}
		b.WriteString(head + "\n")
		b.WriteString(wrap(Plain(v.Doc), "      ", usageWidth))
	}
	return b.String()
}

// Plain is Markdown text as a terminal shows it: a code span without
// its backquotes, a link as its text. Those are all a Doc uses.
func Plain(md string) string {
	var b strings.Builder
	for i := 0; i < len(md); {
		switch md[i] {
		case '`':
			if j := strings.IndexByte(md[i+1:], '`'); j >= 0 {
				b.WriteString(md[i+1 : i+1+j])
				i += j + 2
				continue
			}
		case '[':
			if text, n, ok := link(md[i:]); ok {
				b.WriteString(Plain(text))
				i += n
				continue
			}
		}
		b.WriteByte(md[i])
		i++
	}
	return b.String()
}

// link reads an inline link, "[text](target)", at the start of s: its
// text and its length.
func link(s string) (text string, n int, ok bool) {
	close := strings.Index(s, "](")
	if close < 0 || strings.ContainsAny(s[1:close], "[]") {
		return "", 0, false
	}
	end := strings.IndexByte(s[close:], ')')
	if end < 0 || strings.ContainsAny(s[close+2:close+end], " `") {
		return "", 0, false
	}
	return s[1:close], close + end + 1, true
}

// wrap breaks text into lines of at most width columns, each after
// indent; a word longer than a line gets one of its own.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if line != indent && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	if line != indent {
		b.WriteString(line + "\n")
	}
	return b.String()
}
