package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
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
