package replan_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/replan"
	"github.com/opplace/opplace/strategy"
)

const (
	models   = "../testdata/models/"
	clusters = "../testdata/clusters/"
)

// oldPlan is a plan made before the cluster changed.
type oldPlan struct {
	model, cluster, strategy string
	batch                    int64
	// zero is the ZeRO level the plan is made with, "" for auto's.
	zero string
}

var (
	plansMu sync.Mutex
	plans   = map[oldPlan]string{}
	plansIn string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "replan-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	plansIn = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// planFile plans op once for the package's tests and returns the plan
// file's path.
func planFile(t testing.TB, op oldPlan) string {
	t.Helper()
	plansMu.Lock()
	defer plansMu.Unlock()
	if path, ok := plans[op]; ok {
		return path
	}
	res, err := pipeline.Run(context.Background(), pipeline.Options{ModelPath: models + op.model, ClusterPath: clusters + op.cluster + ".yaml",
		Strategy: op.strategy, Strategies: strategy.Config{Sharding: op.zero}, Import: pipeline.ImportOptions{Batch: op.batch}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(plansIn, fmt.Sprintf("%s-%s-%s-%d%s.json", op.model, op.cluster, strings.ReplaceAll(op.strategy, ":", "_"), op.batch, op.zero))
	var buf bytes.Buffer
	if err := plan.Write(&buf, res.Plan, plan.JSON); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	plans[op] = path
	return path
}

// The three cases.
var (
	gpt2XL   = oldPlan{"gpt2_xl.onnx", "8xA100-2host", "pipeline", 8, ""}
	bertBase = oldPlan{"bert_base.onnx", "4xV100", "auto", 32, ""}
	// bert_base data-parallel under ZeRO-3: each replica alone holds its
	// shard of the weights.
	bertZeRO3 = oldPlan{"bert_base.onnx", "4xV100", "dp", 32, "zero3"}
	resnet    = oldPlan{"resnet50.onnx", "8xA100-2host", "dp", 0, ""}
)

type replanCase struct {
	name    string
	old     oldPlan
	cluster string
	// lost and added devices; whether the old plan runs on the new
	// cluster; whether a lost device held state no other device did.
	lost, added     []string
	runs            bool
	fromCheckpoint  bool
	chosenKeepsPlan bool
}

var cases = []replanCase{
	{name: "gpt2_xl pipeline, 8xA100-2host minus n0gpu3", old: gpt2XL, cluster: "7xA100-2host", lost: []string{"n0gpu3"}, fromCheckpoint: true},
	{name: "bert_base, 4xV100 minus gpu3", old: bertBase, cluster: "3xV100", lost: []string{"gpu3"}},
	{name: "bert_base ZeRO-3, 4xV100 minus gpu3", old: bertZeRO3, cluster: "3xV100", lost: []string{"gpu3"}, fromCheckpoint: true},
	{name: "resnet50 data parallel, 8 to 12 devices", old: resnet, cluster: "12xA100-3host", added: []string{"n2gpu0", "n2gpu1", "n2gpu2", "n2gpu3"},
		runs: true, chosenKeepsPlan: true},
}

func run(t testing.TB, old oldPlan, cluster string, k int64) *replan.Result {
	t.Helper()
	res, err := replan.Run(context.Background(), replan.Options{PlanPath: planFile(t, old), ModelPath: models + old.model,
		ClusterPath: clusters + cluster + ".yaml", AmortizeSteps: k})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestReplanCases re-plans the three cases and checks what the
// result says holds together: the devices lost and added, the moves
// adding up to the bytes moved and fitting in the migration time, every
// candidate's objective, and the chosen plan the least.
func TestReplanCases(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, tc.old, tc.cluster, 0)
			if !slices.Equal(res.Devices.Lost, tc.lost) || !slices.Equal(res.Devices.Added, tc.added) {
				t.Errorf("lost %v added %v, want %v and %v", res.Devices.Lost, res.Devices.Added, tc.lost, tc.added)
			}
			if res.Before.RunsOnNew != tc.runs {
				t.Errorf("the old plan runs on the new cluster: %v (%s), want %v", res.Before.RunsOnNew, res.Before.Why, tc.runs)
			}
			if !tc.runs && !strings.Contains(res.Before.Why, tc.lost[0]) {
				t.Errorf("why the old plan cannot run: %q, want it to name %s", res.Before.Why, tc.lost[0])
			}
			if res.AmortizeSteps != replan.DefaultAmortizeSteps || res.CheckpointBandwidth != replan.DefaultCheckpointBandwidth {
				t.Errorf("K %d, bandwidth %g: want the defaults", res.AmortizeSteps, res.CheckpointBandwidth)
			}
			c := res.Chosen
			if !c.Fits || res.Plan == nil || !res.Plan.Fits || res.Plan.PredictedStepMS != c.StepMS {
				t.Fatalf("chosen %+v, plan step %v", c, res.Plan.PredictedStepMS)
			}
			if c.Keep != tc.chosenKeepsPlan {
				t.Errorf("chosen keeps the old plan: %v, want %v", c.Keep, tc.chosenKeepsPlan)
			}
			if (c.CheckpointBytes > 0) != tc.fromCheckpoint {
				t.Errorf("%d bytes from the checkpoint", c.CheckpointBytes)
			}
			for _, o := range res.Candidates {
				if !o.Fits {
					continue
				}
				var link, ckpt int64
				for _, m := range o.Moves {
					if m.Bytes != m.WeightBytes+m.OptimizerBytes+m.GradientBytes || m.EndMS > o.MigrationMS+1e-6 || m.StartMS < 0 {
						t.Errorf("%s: move %+v in a migration of %g ms", o.Strategy, m, o.MigrationMS)
					}
					if m.From == replan.Checkpoint {
						ckpt += m.Bytes
					} else {
						link += m.Bytes
					}
				}
				if link != o.LinkBytes || ckpt != o.CheckpointBytes || o.MigrationMS < o.MigrationBoundMS-1e-6 {
					t.Errorf("%s: moves add to %d+%d bytes, says %d+%d; migration %g ms, bound %g", o.Strategy, link, ckpt, o.LinkBytes, o.CheckpointBytes,
						o.MigrationMS, o.MigrationBoundMS)
				}
				want := o.StepMS*float64(res.AmortizeSteps) + o.MigrationMS
				if d := o.ObjectiveMS - want; d > 1e-3 || d < -1e-3 {
					t.Errorf("%s: objective %g ms, want %g", o.Strategy, o.ObjectiveMS, want)
				}
				if o.ObjectiveMS < c.ObjectiveMS {
					t.Errorf("%s's objective %g ms is below the chosen's %g", o.Strategy, o.ObjectiveMS, c.ObjectiveMS)
				}
			}
			if b := res.BreakEvenSteps; b != nil && *b != 0 && *b < res.AmortizeSteps {
				t.Errorf("break-even after %d steps, under K %d: the from-scratch plan would have won", *b, res.AmortizeSteps)
			}
			be := "never"
			if res.BreakEvenSteps != nil {
				be = fmt.Sprint(*res.BreakEvenSteps)
			}
			t.Logf("%s: chosen %s (keep %v, renamed %v), step %.3f ms (before %.3f), migration %.1f ms, %d B over links, %d B from the checkpoint; from scratch %s step %.3f ms migration %.1f ms; break-even %s; %.3f s",
				tc.name, c.Strategy, c.Keep, c.Renamed, c.StepMS, res.Before.StepMS, c.MigrationMS, c.LinkBytes, c.CheckpointBytes,
				res.FromScratch.Strategy, res.FromScratch.StepMS, res.FromScratch.MigrationMS, be, res.Wall.Seconds())
		})
	}
}

// TestReplanSmallK: over few steps the migration weighs most, and the
// re-plan moves no more state, nor for longer, than the from-scratch plan.
func TestReplanSmallK(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, tc.old, tc.cluster, 1)
			c, f := res.Chosen, res.FromScratch
			if c.MigrationMS > f.MigrationMS || c.LinkBytes+c.CheckpointBytes > f.LinkBytes+f.CheckpointBytes {
				t.Errorf("K=1: the chosen %s moves %d bytes in %g ms, the from-scratch %s %d bytes in %g ms", c.Strategy, c.LinkBytes+c.CheckpointBytes,
					c.MigrationMS, f.Strategy, f.LinkBytes+f.CheckpointBytes, f.MigrationMS)
			}
		})
	}
}

// TestReplanLargeK: as K grows the step weighs most, and the chosen step
// converges to the from-scratch plan's (or the old plan's, where it runs
// faster still).
func TestReplanLargeK(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prev := -1.0
			for _, k := range []int64{10, 1000, 1e9} {
				res := run(t, tc.old, tc.cluster, k)
				c, f := res.Chosen, res.FromScratch
				if prev >= 0 && c.StepMS > prev+1e-9 {
					t.Errorf("K=%d: the chosen step %g ms is longer than at a smaller K (%g)", k, c.StepMS, prev)
				}
				prev = c.StepMS
				if k == 1e9 && c.StepMS > f.StepMS {
					t.Errorf("K=%d: the chosen step %g ms, the from-scratch %g", k, c.StepMS, f.StepMS)
				}
				if k == 1e9 && !res.Before.RunsOnNew && c.StepMS != f.StepMS {
					t.Errorf("K=%d: the chosen step %g ms, the from-scratch %g", k, c.StepMS, f.StepMS)
				}
			}
		})
	}
}

// TestReplanSameCluster: on the same devices nothing moves and the old
// plan is kept, shape and devices.
func TestReplanSameCluster(t *testing.T) {
	for _, old := range []oldPlan{bertBase, resnet} {
		t.Run(old.model, func(t *testing.T) {
			res := run(t, old, old.cluster, 0)
			c := res.Chosen
			if !c.Keep || c.MigrationMS != 0 || c.LinkBytes != 0 || c.CheckpointBytes != 0 || len(res.Devices.Lost)+len(res.Devices.Added) != 0 {
				t.Fatalf("chosen %+v, devices %+v", c, res.Devices)
			}
			oldPlan, err := plan.ReadFile(planFile(t, old))
			if err != nil {
				t.Fatal(err)
			}
			if c.StepMS != oldPlan.PredictedStepMS || len(res.Plan.Stages) != len(oldPlan.Stages) {
				t.Fatalf("step %g ms, %d stages; the old plan %g ms, %d stages", c.StepMS, len(res.Plan.Stages), oldPlan.PredictedStepMS, len(oldPlan.Stages))
			}
			for i, st := range res.Plan.Stages {
				o := oldPlan.Stages[i]
				if !slices.Equal(st.Devices, o.Devices) || st.Sharding != o.Sharding || st.TensorParallel != o.TensorParallel {
					t.Errorf("stage %d: %v %s tp %d, the old plan's %v %s tp %d", i, st.Devices, st.Sharding, st.TensorParallel, o.Devices, o.Sharding, o.TensorParallel)
				}
			}
			for i := range res.Plan.Ops {
				if res.Plan.Ops[i].Device != oldPlan.Ops[i].Device {
					t.Fatalf("op %s on %s, the old plan's on %s", res.Plan.Ops[i].Name, res.Plan.Ops[i].Device, oldPlan.Ops[i].Device)
				}
			}
			// The from-scratch plan on the same cluster is the old one
			// too: it moves nothing once its devices are renamed.
			if f := res.FromScratch; f.StepMS == c.StepMS && f.LinkBytes+f.CheckpointBytes != 0 {
				t.Errorf("from scratch %s, step %g ms as the old plan's, moves %d bytes", f.Strategy, f.StepMS, f.LinkBytes+f.CheckpointBytes)
			}
		})
	}
}

// TestReplanDeterministic: the same inputs give the same bytes, JSON and
// plan.
func TestReplanDeterministic(t *testing.T) {
	var outs [2][2]bytes.Buffer
	for i := range outs {
		res := run(t, bertBase, "3xV100", 0)
		if err := replan.WriteJSON(&outs[i][0], res); err != nil {
			t.Fatal(err)
		}
		if err := plan.Write(&outs[i][1], res.Plan, plan.JSON); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(outs[0][0].Bytes(), outs[1][0].Bytes()) || !bytes.Equal(outs[0][1].Bytes(), outs[1][1].Bytes()) {
		t.Error("two re-plans of the same inputs differ")
	}
	for _, f := range replan.Formats() {
		res := run(t, bertBase, "3xV100", 0)
		var buf bytes.Buffer
		if err := replan.WriteResult(&buf, res, f); err != nil || buf.Len() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestReplanRenames: a plan on the same cluster whose device names are
// swapped within a host is moved back by renaming, at no cost to its
// step, instead of moving its state.
func TestReplanRenames(t *testing.T) {
	old, err := plan.ReadFile(planFile(t, bertBase))
	if err != nil {
		t.Fatal(err)
	}
	// The old plan as if gpu0 and gpu1 had traded their work: the search
	// on the same cluster finds the plan as made, which holds what each
	// device has under the other's name.
	swap := map[string]string{"gpu0": "gpu1", "gpu1": "gpu0"}
	sw := func(d string) string {
		if s, ok := swap[d]; ok {
			return s
		}
		return d
	}
	for i := range old.Ops {
		old.Ops[i].Device = sw(old.Ops[i].Device)
	}
	for i := range old.Stages {
		st := &old.Stages[i]
		for j := range st.Devices {
			st.Devices[j] = sw(st.Devices[j])
		}
		for _, rep := range st.ReplicaDevices {
			for j := range rep {
				rep[j] = sw(rep[j])
			}
		}
	}
	res, err := replan.Run(context.Background(), replan.Options{Plan: old, PlanPath: "swapped.json", ModelPath: models + bertBase.model,
		ClusterPath: clusters + "3xV100.yaml", AmortizeSteps: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	renamed := false
	for _, o := range res.Candidates {
		renamed = renamed || o.Renamed
	}
	if !renamed {
		t.Errorf("no candidate was renamed: %+v", res.Candidates)
	}
}

// TestReplanErrors: bad input is one *pipeline.InputError naming the
// file or field.
func TestReplanErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"name": "not a plan"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bertPlan := planFile(t, bertBase)
	for _, tc := range []struct {
		name string
		opts replan.Options
		want string
	}{
		{"no plan", replan.Options{ClusterPath: clusters + "3xV100.yaml"}, "no plan given"},
		{"not a plan", replan.Options{PlanPath: bad, ClusterPath: clusters + "3xV100.yaml"}, bad},
		{"no cluster", replan.Options{PlanPath: bertPlan}, "no new cluster"},
		{"another model", replan.Options{PlanPath: bertPlan, ModelPath: models + "gpt2_small.onnx", ClusterPath: clusters + "3xV100.yaml",
			Planning: pipeline.Options{Import: pipeline.ImportOptions{Batch: 32}}}, "another model"},
		{"another batch", replan.Options{PlanPath: bertPlan, ModelPath: models + bertBase.model, ClusterPath: clusters + "3xV100.yaml",
			Planning: pipeline.Options{Import: pipeline.ImportOptions{Batch: 16}}}, "batch is 32"},
		{"another mode", replan.Options{PlanPath: bertPlan, ModelPath: models + bertBase.model, ClusterPath: clusters + "3xV100.yaml",
			Planning: pipeline.Options{Mode: pipeline.ModeInfer}}, "mode"},
		{"negative K", replan.Options{PlanPath: bertPlan, ClusterPath: clusters + "3xV100.yaml", AmortizeSteps: -1}, "steps"},
		{"no model there", replan.Options{PlanPath: bertPlan, ModelPath: filepath.Join(dir, "none.onnx"), ClusterPath: clusters + "3xV100.yaml"}, "none.onnx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := replan.Run(context.Background(), tc.opts)
			var in *pipeline.InputError
			if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want an input error naming %q", err, tc.want)
			}
		})
	}
}
