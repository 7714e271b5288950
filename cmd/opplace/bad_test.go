package main

import (
	"bytes"
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
	// Copy lists files copied into the case's temporary directory
	// ({tmp}) first, for cases that name an input as an output: a
	// regression then damages a copy, never the repository's file.
	Copy []string `yaml:"copy"`
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
			tmp := t.TempDir()
			out := filepath.Join(tmp, "out")
			expand := strings.NewReplacer("{bad}", badDir, "{models}", modelDir, "{clusters}", clusterDir,
				"{tmp}", tmp, "{out}", out).Replace
			before := map[string][]byte{}
			for _, c := range tc.Copy {
				data, err := os.ReadFile(expand(c))
				if err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(tmp, filepath.Base(c))
				if err := os.WriteFile(dst, data, 0o644); err != nil {
					t.Fatal(err)
				}
				before[filepath.Base(c)] = data
			}
			args := make([]string, len(tc.Args))
			for i, a := range tc.Args {
				if f, ok := strings.CutPrefix(a, "{bad}/"); ok {
					used[f] = true
				}
				args[i] = expand(a)
			}
			if args[0] == "plan" && !slices.Contains(args, "--out") && !slices.Contains(args, "-o") {
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
			entries, _ := os.ReadDir(tmp)
			for _, e := range entries {
				if data, ok := before[e.Name()]; !ok {
					t.Errorf("a failed run left %s behind", e.Name())
				} else if now, _ := os.ReadFile(filepath.Join(tmp, e.Name())); !bytes.Equal(now, data) {
					t.Errorf("a failed run changed its input %s", e.Name())
				}
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
