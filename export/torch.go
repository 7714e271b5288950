package export

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/opplace/opplace/plan"
)

func init() {
	Register("torch-pipelining", "Python: split_spec for torch.distributed.pipelining.pipeline (module FQN -> SplitPoint.BEGINNING), with the stages' devices and schedule",
		func() Target { return torchPipelining{} })
}

// torchPipelining writes a Python file defining split_spec for
// torch.distributed.pipelining.pipeline(module, mb_args=...,
// split_spec=split_spec): the module each stage after the first begins
// with, by its fully qualified name, mapped to SplitPoint.BEGINNING.
type torchPipelining struct{}

// torchSchedules maps a plan's schedule to torch.distributed.pipelining's
// name for it and its class.
var torchSchedules = map[string][2]string{
	"1f1b":  {"1F1B", "Schedule1F1B"},
	"gpipe": {"GPipe", "ScheduleGPipe"},
}

func (torchPipelining) Export(w io.Writer, p *plan.Plan, o Options) error {
	c, err := moduleCuts(p, o, "torch-pipelining")
	if err != nil {
		return err
	}
	sched := p.Schedule
	if sched == "" {
		sched = "1f1b"
	}
	names, ok := torchSchedules[sched]
	if !ok {
		return errorf(Invalid, "%s: schedule %q has no torch.distributed.pipelining counterpart (1f1b or gpipe)", o.source(), p.Schedule)
	}
	micro := max(p.MicroBatches, 1)
	bw := bufio.NewWriter(w)
	pr := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	pr("# Split points for torch.distributed.pipelining, written by opplace export (target torch-pipelining).\n")
	pr("# plan:     %s (strategy %s, cluster %s, %s)\n", comment(o.source()), comment(p.Strategy), comment(p.Cluster), comment(p.Mode))
	pr("# model:    %s\n", comment(p.Model))
	step := fmt.Sprintf("%s predicted", plan.FormatMS(p.PredictedStepMS))
	if p.Batch > 0 {
		step += fmt.Sprintf(", batch %d, %.1f samples/s", p.Batch, p.ThroughputSamplesPerS)
	}
	pr("# step:     %s\n", step)
	pr("# schedule: %s (torch.distributed.pipelining.%s), %s per step\n", names[0], names[1], plan.Count(micro, "micro-batch", "micro-batches"))
	pr("# stages (module FQNs; op names' module paths in brackets):\n")
	for _, st := range c.Stages {
		s := st.Index
		rep := ""
		if st.Replicas > 1 {
			rep = fmt.Sprintf(", %d replicas", st.Replicas)
		}
		if st.MicroBatchSize > 0 {
			rep += fmt.Sprintf(", %s per replica per micro-batch", plan.Count(int(st.MicroBatchSize), "sample", "samples"))
		}
		if st.TensorParallel > 1 {
			rep += fmt.Sprintf(", tensor-parallel groups of %d (ops[].shard in the plan says each op's split)", st.TensorParallel)
		}
		pr("#   %d  %s%s: %s  [%s .. %s]\n", s, comment(strings.Join(st.Devices, ",")), rep, comment(c.stageRange(s)),
			comment(c.Layers[c.First[s]].Path), comment(c.Layers[c.First[s+1]-1].Path))
	}
	pr("#\n")
	pr("# pipe = torch.distributed.pipelining.pipeline(model, mb_args=(micro_batch,), split_spec=split_spec)\n")
	pr("# stage = pipe.build_stage(stage_index, device)\n")
	pr("# schedule = torch.distributed.pipelining.%s(stage, n_microbatches=n_microbatches, loss_fn=loss_fn)\n", names[1])
	pr("\n")
	pr("from torch.distributed.pipelining import SplitPoint\n\n")
	pr("n_stages = %d\n", len(c.Stages))
	pr("n_microbatches = %d\n", micro)
	pr("schedule = %s  # torch.distributed.pipelining.%s\n", pyString(names[0]), names[1])
	pr("schedule_class = %s\n", pyString(names[1]))
	pr("# devices of each stage, replica after replica (opplace's device names)\n")
	pr("stage_devices = [\n")
	for _, st := range c.Stages {
		var ds []string
		for _, d := range st.Devices {
			ds = append(ds, pyString(d))
		}
		pr("    [%s],\n", strings.Join(ds, ", "))
	}
	pr("]\n\n")
	pr("split_spec = {\n")
	for _, st := range c.Stages[1:] {
		l := c.Layers[c.First[st.Index]]
		pr("    %s: SplitPoint.BEGINNING,  # stage %d on %s: %s\n", pyString(l.FQN), st.Index, comment(strings.Join(st.Devices, ",")), comment(c.stageRange(st.Index)))
	}
	pr("}\n")
	return bw.Flush()
}
