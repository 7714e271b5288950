package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
)

// TestExitCode maps each typed error, bare or wrapped, to the code the
// README's exit-code table promises; anything else is a bug (1). The
// corpus (TestBadInputCorpus) checks real command lines reach them.
func TestExitCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("context: %w", err) }
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"untyped error", errors.New("boom"), exitInternal},
		{"input error", &pipeline.InputError{Err: errors.New("bad model")}, exitInvalid},
		{"wrapped input error", wrap(&pipeline.InputError{Err: errors.New("bad model")}), exitInvalid},
		{"usage error", usageError{errors.New("bad flag")}, exitInvalid},
		{"output error", &output.Error{Path: "x", Err: errors.New("read-only")}, exitInvalid},
		{"wrapped output error", wrap(&output.Error{Path: "x", Err: errors.New("read-only")}), exitInvalid},
		{"placement infeasible", &placer.InfeasibleError{Proved: true}, exitInfeasible},
		{"wrapped placement infeasible", wrap(&placer.InfeasibleError{}), exitInfeasible},
		{"partition infeasible", &partition.InfeasibleError{Partitioner: "exact"}, exitInfeasible},
		{"a graph a stage broke", &pipeline.StageCheckError{Stage: "fuse", Err: &graph.CheckError{Invariant: graph.InvAcyclic}}, exitInternal},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("%s: exit %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestOneLine: whatever an error carries, opplace prints one line, its
// control characters escaped.
func TestOneLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"unmarshal errors:\n  line 1: a\n", `unmarshal errors:\n  line 1: a`},
		{"op \"a\rb\x07\" fails", `op "a\rb\a" fails`},
		{"name \u202egnp.exe\tx", `name \u202egnp.exe\tx`},
		{"caf\u00e9", "caf\u00e9"},
	} {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
