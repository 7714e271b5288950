package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestREADMEWorkedExample runs the command of the README's worked example
// and checks the README shows exactly what it prints, but for the solve
// times, which vary from run to run.
func TestREADMEWorkedExample(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## A worked example\n")
	if !ok {
		t.Fatal(`README.md has no "## A worked example" section`)
	}
	var cmdline string
	var shown []string
	for _, line := range strings.Split(section, "\n") {
		switch {
		case cmdline == "" && strings.HasPrefix(line, "    $ bin/opplace "):
			cmdline = strings.TrimPrefix(line, "    $ bin/opplace ")
		case cmdline != "" && (strings.HasPrefix(line, "    ") || line == ""):
			shown = append(shown, strings.TrimPrefix(line, "    "))
		case cmdline != "":
			goto done
		}
	}
done:
	if cmdline == "" {
		t.Fatal("the worked example has no `$ bin/opplace` command")
	}
	args := strings.Fields(cmdline)
	for i, a := range args {
		if strings.HasPrefix(a, "testdata/") {
			args[i] = "../../" + a
		}
	}
	code, stdout, stderr := invoke(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := normalise(strings.ReplaceAll(stdout, "../../testdata/", "testdata/"))
	want := normalise(strings.Join(shown, "\n"))
	if got != want {
		t.Errorf("the README's worked example is out of date; it prints:\n%s", stdout)
	}
}

var fields = regexp.MustCompile(`\s{2,}`)

// normalise drops trailing blank lines, collapses column padding and
// blanks the SOLVE column of the candidates table.
func normalise(s string) string {
	var out []string
	candidates := false
	for _, line := range strings.Split(strings.TrimRight(s, "\n "), "\n") {
		if strings.HasPrefix(line, "candidates") {
			candidates = true
		}
		f := fields.Split(strings.TrimSpace(line), -1)
		if candidates && len(f) == 9 {
			f[7] = "*"
		}
		out = append(out, strings.Join(f, "  "))
	}
	return strings.Join(out, "\n")
}

// docFiles are README.md and every docs/*.md, relative to this package.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, docs...)
}

// mdLink matches an inline markdown link or image: ](target) or
// ](target "title").
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)

// prose returns a markdown document's lines with those of fenced code
// blocks blanked, so that index i is line i+1.
func prose(doc string) []string {
	lines := strings.Split(doc, "\n")
	fence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			lines[i] = ""
		} else if fence {
			lines[i] = ""
		}
	}
	return lines
}

// anchors returns the heading anchors GitHub gives a markdown document:
// the heading lower-cased, without punctuation, spaces as hyphens, and a
// repeated one suffixed -1, -2, ...
func anchors(doc string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose(doc) {
		text := strings.TrimLeft(line, "#")
		if len(text) == len(line) || len(line)-len(text) > 6 || !strings.HasPrefix(text, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// TestDocLinksResolve checks that every relative link in README.md and
// docs/*.md names a file that exists and, when it names a heading of a
// markdown file, a heading that exists. docs/views.md may be missing until
// it is written.
func TestDocLinksResolve(t *testing.T) {
	texts := map[string]string{}
	read := func(path string) (string, error) {
		if s, ok := texts[path]; ok {
			return s, nil
		}
		b, err := os.ReadFile(path)
		texts[path] = string(b)
		return string(b), err
	}
	for _, file := range docFiles(t) {
		doc, err := read(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(file, "../../")
		for i, line := range prose(doc) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(link, "#")
				target := file
				if path != "" {
					target = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				text, err := read(target)
				if errors.Is(err, fs.ErrNotExist) && filepath.ToSlash(filepath.Clean(target)) == "../../docs/views.md" {
					continue // written by another change; checked once it exists
				}
				if err != nil {
					if _, serr := os.Stat(target); serr == nil {
						err = nil // a directory or another readable path
					}
				}
				if err != nil {
					t.Errorf("%s: line %d: link %q: %v", name, i+1, link, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(target, ".md") && !anchors(text)[anchor] {
					t.Errorf("%s: line %d: link %q: %s has no heading with anchor #%s", name, i+1, link, filepath.Base(target), anchor)
				}
			}
		}
	}
}

// TestClusterExamplesMatchDocs checks that the cluster-file examples the
// README keeps (cluster's TestFormatExamples parses them there) are the
// ones docs/clusters.md shows.
func TestClusterExamplesMatchDocs(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile("../../docs/clusters.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Cluster files\n")
	if !ok {
		t.Fatal(`README.md has no "## Cluster files" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := strings.Split(section, "```yaml\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("the README's cluster section has no yaml block")
	}
	for i, b := range blocks {
		src, _, _ := strings.Cut(b, "```")
		if !strings.Contains(string(docs), "```yaml\n"+src+"```") {
			t.Errorf("yaml block %d of the README's cluster section is not in docs/clusters.md:\n%s", i, src)
		}
	}
}

// TestDocPictures regenerates the Graphviz views the README and
// docs/views.md show and checks they are the committed ones; the SVG
// beside each was rendered from it (`--dot F.dot --svg F.svg`).
func TestDocPictures(t *testing.T) {
	for _, tc := range []struct {
		dot  string
		args []string
	}{
		{"worked-example.dot", []string{"plan", "testdata/models/resnet50.onnx", "--cluster", "testdata/clusters/4xV100.yaml"}},
		{"resnet50-hetero.dot", []string{"plan", "testdata/models/resnet50.onnx", "--cluster", "testdata/clusters/hetero.yaml"}},
	} {
		out := filepath.Join(t.TempDir(), tc.dot)
		args := append([]string{}, tc.args...)
		for i, a := range args {
			if strings.HasPrefix(a, "testdata/") {
				args[i] = "../../" + a
			}
		}
		if code, _, stderr := invoke(t, append(args, "--dot", out, "-o", "table")...); code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.dot, code, stderr)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("../../docs/img", tc.dot))
		if err != nil {
			t.Fatal(err)
		}
		if strings.ReplaceAll(string(got), "../../testdata/", "testdata/") != string(want) {
			t.Errorf("docs/img/%s is out of date: regenerate it and its SVG with bin/opplace %s --dot docs/img/%s --svg docs/img/%s",
				tc.dot, strings.Join(tc.args, " "), tc.dot, strings.TrimSuffix(tc.dot, ".dot")+".svg")
		}
	}
}
