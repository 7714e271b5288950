package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
)

// TestGivenDocExample runs the example of docs/plan-space.md's "A given
// placement" and checks the page shows what it prints: the placement of
// testdata/costed/tiny-placement.yaml, 3.020 ms by hand.
func TestGivenDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plan-space.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## A given placement\n")
	if !ok {
		t.Fatal(`docs/plan-space.md has no "## A given placement" section`)
	}
	_, block, ok := strings.Cut(section, "\n$ opplace plan ")
	if !ok {
		t.Fatal("the section shows no `$ opplace plan` command")
	}
	cmdline, shown, _ := strings.Cut(block, "\n")
	shown, _, _ = strings.Cut(shown, "```")
	args := append([]string{"plan"}, strings.Fields(cmdline)...)
	for i, a := range args {
		if strings.HasPrefix(a, "testdata/") {
			args[i] = "../../" + a
		}
	}
	code, stdout, stderr := invoke(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got, want := normalise(strings.ReplaceAll(stdout, "../../testdata/", "testdata/")), normalise(shown); got != want {
		t.Errorf("docs/plan-space.md's example of a given placement is out of date; it prints:\n%s", stdout)
	}
}

// TestPlanPlacementRoundTrip: the plan file of `opplace plan` on a real
// model (GPT-2 small, the shared export's copy, trained at batch 8) given
// back with --placement is reported like any plan, every output
// included, at exactly the original step; compare lists it as given.
func TestPlanPlacementRoundTrip(t *testing.T) {
	dir := t.TempDir()
	model, cl := filepath.Join(modelDir, "gpt2_small.onnx"), filepath.Join(clusterDir, "4xV100.yaml")
	first := filepath.Join(dir, "m-etf.json")
	if code, _, stderr := invoke(t, "plan", model, "--cluster", cl, "--dim", "batch=8", "--strategy", "m-etf", "--out", first, "-q"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	orig, err := plan.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	out, dot, trace := filepath.Join(dir, "given.yaml"), filepath.Join(dir, "given.dot"), filepath.Join(dir, "given.trace.json")
	code, stdout, stderr := invoke(t, "plan", model, "--cluster", cl, "--dim", "batch=8", "--placement", first,
		"--out", out, "--dot", dot, "--trace", trace, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var again plan.Plan
	if err := json.Unmarshal([]byte(stdout), &again); err != nil {
		t.Fatalf("stdout is no JSON plan: %v", err)
	}
	if again.PredictedStepMS != orig.PredictedStepMS || again.Strategy != "given" || again.Family != "placement" {
		t.Errorf("given back: %v ms (%s, %s), want %v ms (given, placement)", again.PredictedStepMS, again.Strategy, again.Family, orig.PredictedStepMS)
	}
	if y, err := plan.ReadFile(out); err != nil || y.PredictedStepMS != orig.PredictedStepMS {
		t.Errorf("--out %s: %v, step %v", out, err, y)
	}
	checkDOT(t, dot)
	if fi, err := os.Stat(trace); err != nil || fi.Size() == 0 {
		t.Errorf("--trace: %v", err)
	}

	code, stdout, stderr = invoke(t, "compare", model, "--cluster", cl, "--dim", "batch=8", "--placement", first,
		"--strategy", "m-etf", "--strategy", "given", "-o", "json")
	if code != 0 {
		t.Fatalf("compare: exit %d: %s", code, stderr)
	}
	var c pipeline.Comparison
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Strategies) != 2 || c.Strategies[1].Strategy != "given" || c.Strategies[1].PredictedStepMS != c.Strategies[0].PredictedStepMS {
		t.Errorf("compare rows %+v: want given beside m-etf at its step", c.Strategies)
	}
}

// TestPlanPlacementFill: a placement of some ops, the rest placed by
// --fill, in a table that says so; without --fill the run names the flag.
func TestPlanPlacementFill(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(p, []byte("a: a100\nc: v100b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"plan", filepath.Join(costedDir, "tiny.json"), "--cluster", filepath.Join(clusterDir, "hetero.yaml"), "--placement", p, "-o", "table"}
	code, stdout, stderr := invoke(t, append(args, "--fill", "m-etf")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"strategy:   given", "note: given: placement from " + p + ": 2 ops by name, 2 placed by m-etf"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = invoke(t, args...)
	if code != 2 || stdout != "" || !strings.Contains(stderr, p+` leaves 2 ops of 4 unplaced ("b", "d")`) || !strings.Contains(stderr, "--fill STRATEGY") {
		t.Errorf("without --fill: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
