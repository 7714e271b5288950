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
