package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/onnx"
)

// TestRuntimeFlag: --runtime compile names the runtime in the table, and
// --emit-model gives each op a fused attention kernel runs its device, so
// every node of the model file is placed; an unknown runtime, or a
// fusion mode the runtime does not run, exits 2 naming the choices.
func TestRuntimeFlag(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../testdata/models/gpt2_small.onnx")
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "gpt2_small.onnx")
	if err := os.WriteFile(model, data, 0o644); err != nil {
		t.Fatal(err)
	}
	emitted := filepath.Join(dir, "placed.onnx")
	args := []string{"plan", model, "--cluster", "../../testdata/clusters/4xV100.yaml", "--dim", "batch=4", "--mode", "infer", "-q"}
	code, stdout, stderr := invoke(t, append(args, "--runtime", "compile", "--strategy", "m-etf", "-o", "table", "--emit-model", emitted)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "runtime:    compile\n") {
		t.Errorf("the table does not name the runtime:\n%s", stdout)
	}
	out, err := os.ReadFile(emitted)
	if err != nil {
		t.Fatal(err)
	}
	devices, _, err := onnx.Devices(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"/blocks/blocks.0/Softmax", "/blocks/blocks.11/MatMul_1", "/blocks/blocks.0/qkv/MatMul"} {
		if devices[op] == "" {
			t.Errorf("%s has no device in the emitted model", op)
		}
	}
	for _, tc := range []struct{ flags []string }{
		{[]string{"--runtime", "tensorrt"}},
		{[]string{"--runtime", "eager", "--fusion", "hybrid"}},
	} {
		code, _, stderr := invoke(t, append(args, tc.flags...)...)
		if code != 2 || !strings.Contains(stderr, "runtime") {
			t.Errorf("%v: exit %d, %q; want 2 and a message on the runtime", tc.flags, code, stderr)
		}
	}
}
