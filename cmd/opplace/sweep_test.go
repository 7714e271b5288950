package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sweep"
)

// TestSweepMatchesPlan runs opplace sweep and then opplace plan on each
// point's cluster file, as a user checking a point would, and compares
// the figures: the sweep shares one import between points, plan reads
// the model afresh.
func TestSweepMatchesPlan(t *testing.T) {
	dir := t.TempDir()
	types := "../../sweep/testdata/small-types.yaml"
	tmplPath := "../../sweep/testdata/priced.yaml"
	model := filepath.Join(modelDir, "resnet50.onnx")
	gavel, svg := filepath.Join(dir, "g.json"), filepath.Join(dir, "s.svg")
	code, stdout, stderr := invoke(t, "sweep", model, "--types", "T4-256MiB,A100-80GB", "--counts", "1,5",
		"--types-file", types, "--cluster-template", tmplPath, "-o", "json", "--gavel", gavel, "--svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Version int           `json:"version"`
		Points  []sweep.Point `json:"points"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.Version != 1 || len(res.Points) != 4 {
		t.Fatalf("version %d, %d points", res.Version, len(res.Points))
	}
	tmpl, err := sweep.LoadTemplate(tmplPath)
	if err != nil {
		t.Fatal(err)
	}
	custom, err := sweep.LoadTypes(types)
	if err != nil {
		t.Fatal(err)
	}
	unfit := 0
	for _, p := range res.Points {
		g, err := tmpl.Cluster(p.Type, p.Devices, custom)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, g.Name+".yaml")
		if err := os.WriteFile(path, g.YAML, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := invoke(t, "plan", model, "--cluster", path, "-o", "json")
		if code != 0 {
			unfit++
			if code != exitInfeasible || p.Fits || !strings.Contains(errs, p.WhyNot) {
				t.Errorf("%s: plan exits %d (%s); the sweep says fits %v, %q", g.Name, code, errs, p.Fits, p.WhyNot)
			}
			continue
		}
		var pl plan.Plan
		if err := json.Unmarshal([]byte(out), &pl); err != nil {
			t.Fatal(err)
		}
		if !p.Fits || p.ThroughputSamplesPerS != pl.ThroughputSamplesPerS || p.StepMS != pl.PredictedStepMS || p.Strategy != pl.Strategy {
			t.Errorf("%s: sweep %+v, plan %s %v samples/s %v ms", g.Name, p, pl.Strategy, pl.ThroughputSamplesPerS, pl.PredictedStepMS)
		}
	}
	if unfit == 0 || unfit == len(res.Points) {
		t.Errorf("%d of %d points do not fit: the test wants both kinds", unfit, len(res.Points))
	}
	var g map[string]map[string]map[string]float64
	data, err := os.ReadFile(gavel)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &g); err != nil || len(g["A100-80GB"]) != 2 || g["A100-80GB"]["('resnet50', 5)"]["null"] <= 0 {
		t.Errorf("--gavel wrote %s (%v)", data, err)
	}
	if data, err := os.ReadFile(svg); err != nil || !strings.HasPrefix(string(data), "<svg") {
		t.Errorf("--svg: %v", err)
	}
}

// TestREADMESweepExample runs the README's opplace sweep example and
// checks the README shows the table it prints.
func TestREADMESweepExample(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "    $ bin/opplace sweep ")
	if !ok {
		t.Fatal("README.md has no `$ bin/opplace sweep` example")
	}
	lines := strings.Split(section, "\n")
	var shown []string
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, "    $ ") {
			break
		}
		shown = append(shown, strings.TrimPrefix(line, "    "))
	}
	args := []string{"sweep"}
	for _, a := range strings.Fields(lines[0]) {
		switch {
		case strings.HasPrefix(a, "testdata/"):
			a = "../../" + a
		case a == "throughputs.json":
			a = filepath.Join(t.TempDir(), a)
		}
		args = append(args, a)
	}
	code, stdout, stderr := invoke(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := normalise(strings.ReplaceAll(stdout, "../../testdata/", "testdata/"))
	if want := normalise(strings.Join(shown, "\n")); got != want {
		t.Errorf("the README's sweep example is out of date; it prints:\n%s", stdout)
	}
}
