package main

import (
	"encoding/xml"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// checkSVGs: every SVG a document links or shows is well-formed XML
// whose root is an <svg> with a viewBox, and Chromium (Debian's, headless,
// as the dashboard's tests use it) draws it as a picture of more than one
// colour: a diagram that does not render is a broken link too.
func (r *run) checkSVGs() {
	seen := map[string]bool{}
	for _, d := range r.docs {
		for _, l := range d.links() {
			file, _, _ := strings.Cut(l.target, "#")
			if !strings.HasSuffix(file, ".svg") || strings.Contains(file, "://") {
				continue
			}
			p := filepath.Join(filepath.Dir(d.path), file)
			if seen[p] {
				continue
			}
			seen[p] = true
			if err := checkSVGFile(filepath.Join(r.root, p)); err != "" {
				r.fail(filepath.ToSlash(p), 0, "%s", err)
			}
		}
	}
}

func checkSVGFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	root := ""
	viewBox := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "not well-formed XML: " + err.Error()
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
			for _, a := range se.Attr {
				viewBox = viewBox || a.Name.Local == "viewBox"
			}
		}
	}
	if root != "svg" || !viewBox {
		return "want an <svg> root element with a viewBox, got <" + root + ">"
	}
	return render(path)
}

// render draws the SVG with headless Chromium and says what is wrong
// with the picture ("" when it has drawn something).
func render(path string) string {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return "no chromium to render it with (make setup installs it)"
	}
	abs, _ := filepath.Abs(path)
	dir, err := os.MkdirTemp("", "checkdocs-svg")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	shot := filepath.Join(dir, "shot.png")
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1000,700", "--screenshot="+shot, "file://"+abs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "chromium --screenshot: " + err.Error() + ": " + lastLine(string(out))
	}
	f, err := os.Open(shot)
	if err != nil {
		return "chromium wrote no screenshot: " + err.Error()
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return "the screenshot: " + err.Error()
	}
	if n := colours(img, 3); n < 3 {
		return "rendered blank: the screenshot has fewer than 3 colours"
	}
	return ""
}

// colours counts the distinct colours of img, up to limit.
func colours(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r >> 8, g >> 8, bl >> 8, a >> 8}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
