package main

import (
	"strings"
	"testing"
)

// TestParallelFlag: --parallel plans the configuration as given and is
// refused beside the flags that shape a search, another --strategy, or a
// malformed configuration; compare lists it as one more row.
func TestParallelFlag(t *testing.T) {
	args := []string{"plan", "../../testdata/models/gpt2_small.onnx", "--cluster", "../../testdata/clusters/8xA100-2host.yaml", "--dim", "batch=16", "-q", "-o", "table"}
	code, stdout, stderr := invoke(t, append(args, "--parallel", "tp=2,pp=2,mbs=2")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"strategy:   parallel\n", "stages: 2, 1f1b schedule, 4 micro-batches of 2 samples per replica",
		"the configuration given: tensor 2 × pipeline 2 × data 2, micro-batch size 2, 4 micro-batches a step"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--parallel", "tp=2", "--zero", "zero1"}, "--parallel gives the whole configuration: drop --zero"},
		{[]string{"--parallel", "tp=2", "--strategy", "dp"}, "not with --strategy dp"},
		{[]string{"--parallel", "tp=2,vp=2"}, `unknown key "vp"`},
		{[]string{"--parallel", "tp=3"}, "tensor 3 × pipeline 1 does not divide the cluster's 8 devices"},
	} {
		code, _, stderr := invoke(t, append(args, tc.flags...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.flags, code, stderr, tc.want)
		}
	}
	cmp := []string{"compare", "../../testdata/models/gpt2_small.onnx", "--cluster", "../../testdata/clusters/8xA100-2host.yaml", "--dim", "batch=16", "-q", "--strategy", "dp", "--strategy", "parallel"}
	code, stdout, stderr = invoke(t, append(cmp, "--parallel", "tp=2,pp=2")...)
	if code != 0 || !strings.Contains(stdout, "parallel: the configuration given") {
		t.Errorf("compare with --parallel: exit %d, %s%s", code, stdout, stderr)
	}
	if code, _, stderr := invoke(t, cmp...); code != 2 || !strings.Contains(stderr, "--parallel SPEC") {
		t.Errorf("compare --strategy parallel without --parallel: exit %d, %q", code, stderr)
	}
}
