package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const badDir = "../../testdata/bad"

// badCase is one entry of testdata/bad/cases.yaml.
type badCase struct {
	Name    string   `yaml:"name"`
	Args    []string `yaml:"args"`
	Exit    int      `yaml:"exit"`
	Message string   `yaml:"message"`
}

// TestBadInputCorpus runs every case of the bad-input corpus: the exit
// code and message are the contract the README's exit-code table states.
func TestBadInputCorpus(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(badDir, "cases.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []badCase
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&cases); err != nil {
		t.Fatalf("cases.yaml: %v", err)
	}
	used := map[string]bool{}
	names := map[string]bool{}
	for _, tc := range cases {
		if tc.Name == "" || len(tc.Args) == 0 || tc.Message == "" {
			t.Fatalf("case %+v: name, args and message are required", tc)
		}
		if names[tc.Name] {
			t.Fatalf("case %q is listed twice", tc.Name)
		}
		names[tc.Name] = true
		t.Run(tc.Name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := make([]string, len(tc.Args))
			for i, a := range tc.Args {
				if f, ok := strings.CutPrefix(a, "{bad}/"); ok {
					used[f] = true
				}
				args[i] = strings.NewReplacer("{bad}", badDir, "{models}", modelDir, "{clusters}", clusterDir,
					"{profiles}", "../../testdata/profiles", "{out}", out).Replace(a)
			}
			if args[0] == "plan" && !slices.Contains(tc.Args, "{out}") && !slices.Contains(args, "-o") {
				args = append(args, "--out", out)
			}
			code, stdout, stderr := invoke(t, args...)
			if code != tc.Exit {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.Exit, stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("stderr shows a panic:\n%s", stderr)
			}
			if tc.Exit == 0 {
				if !containsLine(stderr, tc.Message) {
					t.Errorf("stderr has no line with %q:\n%s", tc.Message, stderr)
				}
				return
			}
			if !strings.Contains(stderr, tc.Message) {
				t.Errorf("error does not mention %q:\n%s", tc.Message, stderr)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Errorf("the error spans %d lines, want one:\n%s", n+1, stderr)
			}
			if !strings.HasPrefix(stderr, "opplace: ") {
				t.Errorf("the error does not start with \"opplace: \":\n%s", stderr)
			}
			if stdout != "" {
				t.Errorf("a failed run wrote to stdout:\n%s", stdout)
			}
			entries, _ := os.ReadDir(filepath.Dir(out))
			if len(entries) != 0 {
				t.Errorf("a failed run left files behind: %v", entries)
			}
		})
	}
	if t.Failed() {
		return
	}
	entries, err := os.ReadDir(badDir)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range entries {
		if name := e.Name(); name != "cases.yaml" && name != "gen.go" {
			files++
			if !used[name] {
				t.Errorf("testdata/bad/%s is used by no case of cases.yaml", name)
			}
		}
	}
	if files < 40 {
		t.Errorf("the corpus has %d files, want at least 40", files)
	}
}

// containsLine reports whether some line of s contains sub.
func containsLine(s, sub string) bool {
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			return true
		}
	}
	return false
}
