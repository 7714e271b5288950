package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestQuiet checks that -q changes nothing when stderr is not a terminal
// (as under tests): the same stdout with and without it, in either
// place on the command line, and nothing on stderr.
func TestQuiet(t *testing.T) {
	model := filepath.Join(modelDir, "resnet50.onnx")
	cluster := filepath.Join(clusterDir, "4xV100.yaml")
	tests := []struct {
		name string
		args []string
	}{
		{"plan auto", []string{"plan", model, "--cluster", cluster}},
		{"plan exact", []string{"plan", model, "--cluster", cluster, "--strategy", "pipeline:exact", "-o", "table"}},
		{"compare", []string{"compare", model, "--cluster", cluster, "--strategy", "pipeline:exact", "--strategy", "dp", "-o", "json"}},
	}
	t.Run("help", func(t *testing.T) {
		for _, args := range [][]string{{"--help"}, {"plan", "--help"}, {"profile", "--help"}} {
			_, stdout, _ := invoke(t, args...)
			if !strings.Contains(stdout, "-q, --quiet") || !strings.Contains(stdout, "no progress bars on stderr") {
				t.Errorf("%v does not list -q, --quiet:\n%s", args, stdout)
			}
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var outs []string
			for _, args := range [][]string{
				tt.args,
				append(append([]string(nil), tt.args...), "-q"),
				append([]string{"--quiet"}, tt.args...),
			} {
				code, stdout, stderr := invoke(t, args...)
				if code != 0 {
					t.Fatalf("%v: exit %d: %s", args, code, stderr)
				}
				if stderr != "" {
					t.Errorf("%v: stderr %q, want none", args, stderr)
				}
				outs = append(outs, scrubSolveTimes(stdout))
			}
			for i := 1; i < len(outs); i++ {
				if outs[i] != outs[0] {
					t.Errorf("stdout differs with -q:\n%s\nwithout:\n%s", outs[i], outs[0])
				}
			}
		})
	}
}

// solveMS matches compare's solve times, the one thing that varies
// between runs.
var solveMS = regexp.MustCompile(`"solve_ms": [0-9.e+-]+`)

func scrubSolveTimes(s string) string { return solveMS.ReplaceAllString(s, `"solve_ms": 0`) }
