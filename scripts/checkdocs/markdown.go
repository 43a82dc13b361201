package main

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// A block is one fenced code block of a Markdown file.
type block struct {
	file string // the document, relative to the repository
	line int    // the line of its opening fence, from 1
	lang string // the first word of the info string, lower case ("" for none)
	info string // the whole info string
	skip string // why it is not checked: the text of a checkdocs: skip marker
	text string // its content, without the fences
}

// doc is one Markdown file as the checks read it.
type doc struct {
	path    string   // relative to the repository
	lines   []string // its lines
	blocks  []block
	prose   []string // its lines with fenced blocks blanked, for links
	fences  []string // problems with its fences
	anchors map[string]bool
}

// skipMarker, on the line before a fence, exempts the block from being
// compiled or run; it must say why ("<!-- checkdocs: skip: a sketch -->").
var skipMarker = regexp.MustCompile(`^<!--\s*checkdocs:\s*skip:?\s*(.*?)\s*-->\s*$`)

// parse reads a Markdown document: its fenced blocks (``` or ~~~, three
// or more, indented at most three spaces), the problems of its fences,
// and its headings' anchors.
func parse(path, text string) *doc {
	d := &doc{path: path, lines: strings.Split(text, "\n"), anchors: map[string]bool{}}
	var open string // the opening fence's run of backticks or tildes
	var cur block
	var body []string
	seen := map[string]int{}
	for i, line := range d.lines {
		n := i + 1
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		marker := fenceMarker(trimmed)
		if open == "" {
			if marker != "" && indent <= 3 {
				open = marker
				info := strings.TrimSpace(trimmed[len(marker):])
				if marker[0] == '`' && strings.Contains(info, "`") {
					d.fences = append(d.fences, "line "+strconv.Itoa(n)+": a backtick in the info string of a ``` fence")
				}
				cur = block{file: path, line: n, info: info}
				if f := strings.Fields(info); len(f) > 0 {
					cur.lang = strings.ToLower(f[0])
				}
				if i > 0 {
					if m := skipMarker.FindStringSubmatch(strings.TrimSpace(d.lines[i-1])); m != nil {
						cur.skip = m[1]
						if cur.skip == "" {
							d.fences = append(d.fences, "line "+strconv.Itoa(i)+": a checkdocs: skip marker must say why")
						}
					}
				}
				body = body[:0]
				d.prose = append(d.prose, "")
				continue
			}
			d.prose = append(d.prose, line)
			if h, ok := heading(line); ok {
				a := slug(h)
				if k := seen[a]; k > 0 {
					d.anchors[a+"-"+strconv.Itoa(k)] = true
				} else {
					d.anchors[a] = true
				}
				seen[a]++
			}
			for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
				d.anchors[m[1]] = true
			}
			continue
		}
		d.prose = append(d.prose, "")
		if marker != "" && marker[0] == open[0] && len(marker) >= len(open) && indent <= 3 {
			if rest := strings.TrimSpace(trimmed[len(marker):]); rest != "" {
				d.fences = append(d.fences, "line "+strconv.Itoa(n)+": text after a closing fence: "+rest)
			}
			cur.text = strings.Join(body, "\n") + "\n"
			d.blocks = append(d.blocks, cur)
			open = ""
			continue
		}
		body = append(body, line)
	}
	if open != "" {
		d.fences = append(d.fences, "the fence opened on line "+strconv.Itoa(cur.line)+" never closes")
	}
	return d
}

// htmlAnchor finds the anchors a document makes by hand (<a id="x">).
var htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)

// fenceMarker returns the run of backticks or tildes a line starts with,
// when it is three or more ("" when the line is no fence).
func fenceMarker(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

// heading returns the text of an ATX heading ("## Text").
func heading(line string) (string, bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || !strings.HasPrefix(t, "#") {
		return "", false
	}
	level := len(t) - len(strings.TrimLeft(t, "#"))
	rest := t[level:]
	if level > 6 || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(rest), "#")), true
}

// slug makes a heading's anchor as GitHub does: lower case, inline
// markup and punctuation dropped (but - and _), spaces as hyphens.
func slug(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	var a strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			a.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			a.WriteRune(r)
		}
	}
	return a.String()
}

// mdLink is an inline link or image: [text](target "title").
var mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)

// refLink is a link reference definition: [label]: target.
var refLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)

// htmlRef is a src or href attribute of inline HTML.
var htmlRef = regexp.MustCompile(`(?:src|href)="([^"]+)"`)

// codeSpan is inline code, where brackets are not links.
var codeSpan = regexp.MustCompile("``[^`]+``|`[^`\n]*`")

// links returns the link targets of a document's prose, with their lines.
func (d *doc) links() []link {
	var out []link
	for i, line := range d.prose {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{line: i + 1, target: m[2]})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			out = append(out, link{line: i + 1, target: m[1]})
		}
		for _, m := range htmlRef.FindAllStringSubmatch(line, -1) {
			out = append(out, link{line: i + 1, target: m[1]})
		}
	}
	return out
}

type link struct {
	line   int
	target string
}
