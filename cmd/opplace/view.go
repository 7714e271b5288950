package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/view"
)

// viewFlags are plan's pictures of the result: Graphviz views, rendered
// or not, and the schedule as a trace.
type viewFlags struct {
	dot, svg, png string
	detail        string
	stage         int
	module        string
	trace         string
}

func (f *viewFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.dot, "dot", "", "write a Graphviz view of the plan to this file (see --dot-detail)")
	fl.StringVar(&f.svg, "svg", "", "render the Graphviz view to this SVG file (needs Graphviz's dot)")
	fl.StringVar(&f.png, "png", "", "render the Graphviz view to this PNG file (needs Graphviz's dot)")
	fl.StringVar(&f.detail, "dot-detail", string(view.Modules), "level of the Graphviz view: device, stage, module (blocks of a module's consecutive ops, the default) or op")
	fl.IntVar(&f.stage, "dot-stage", view.AllStages, "draw only this stage's ops in the module and op views (-1: every stage)")
	fl.StringVar(&f.module, "dot-module", "", "draw only ops whose name starts with this module path in the module and op views, e.g. /layer3/")
	fl.StringVar(&f.trace, "trace", "", "write the simulated step as a Chrome trace (open in ui.perfetto.dev or chrome://tracing)")
}

// options checks the flags before any work is done; changed says which
// flags the command line gave.
func (f *viewFlags) options(changed func(string) bool) (view.Options, error) {
	o := view.DefaultOptions()
	d, err := view.ParseDetail(f.detail)
	if err != nil {
		return o, usageError{fmt.Errorf("--dot-detail: %w", err)}
	}
	if f.stage < view.AllStages {
		return o, usageError{fmt.Errorf("--dot-stage %d: stages count from 0", f.stage)}
	}
	if f.dot == "" && f.svg == "" && f.png == "" {
		for _, name := range []string{"dot-detail", "dot-stage", "dot-module"} {
			if changed(name) {
				return o, usageError{fmt.Errorf("--%s says what the Graphviz view draws, but no view is asked for: add --dot FILE, --svg FILE or --png FILE", name)}
			}
		}
	}
	o.Detail, o.Stage, o.Module = d, f.stage, f.module
	return o, nil
}

// checkStage refuses, before any planning, a --dot-stage no plan on the
// cluster can have: a stage holds at least one device.
func (f *viewFlags) checkStage(c *cluster.Cluster) error {
	if f.stage != view.AllStages && f.stage >= len(c.Devices) {
		return usageError{fmt.Errorf("--dot-stage %d: cluster %q has %d devices, so a plan has at most %d stages (0 to %d)",
			f.stage, c.Name, len(c.Devices), len(c.Devices), len(c.Devices)-1)}
	}
	return nil
}

// pictures makes every picture asked for, drawn with the options the
// flags parsed to, before any file is written, so a view that cannot be
// drawn leaves no file behind.
func (f *viewFlags) pictures(ctx context.Context, o view.Options, res *pipeline.Result, fusion *pipeline.FusionReport) ([]output.File, error) {
	var outs []output.File
	if f.dot != "" || f.svg != "" || f.png != "" {
		if n := len(res.Plan.Stages); o.Stage != view.AllStages && res.Plan.Stage(o.Stage) == nil && (o.Stage > 0 || n > 0) {
			has := fmt.Sprintf("its stages are 0 to %d", n-1)
			if n <= 1 {
				has = "it has one stage, 0"
			}
			return nil, usageError{fmt.Errorf("--dot-stage %d: the plan has no stage %d: %s", o.Stage, o.Stage, has)}
		}
		o.Groups = fusion.Groups()
		var dot bytes.Buffer
		if err := view.WriteDOT(&dot, res.Plan, res.Graph, o); err != nil {
			var big *view.TooLargeError
			if errors.As(err, &big) {
				return nil, usageError{fmt.Errorf("%w; e.g. --dot-stage 0, --dot-module PREFIX or --dot-detail module", err)}
			}
			return nil, usageError{fmt.Errorf("--dot-detail %s: %w", o.Detail, err)}
		}
		if f.dot != "" {
			outs = append(outs, output.Bytes("--dot", f.dot, dot.Bytes()))
		}
		for _, pic := range []struct{ path, format string }{{f.svg, "svg"}, {f.png, "png"}} {
			if pic.path == "" {
				continue
			}
			data, err := view.Render(ctx, dot.Bytes(), pic.format, 0)
			if err != nil {
				err = fmt.Errorf("--%s %s: %w", pic.format, pic.path, err)
				if errors.Is(err, view.ErrNoGraphviz) || errors.Is(err, view.ErrRenderTimeout) {
					err = usageError{err} // the environment or the view's size, not a bug
				}
				return nil, err
			}
			outs = append(outs, output.Bytes("--"+pic.format, pic.path, data))
		}
	}
	if f.trace != "" {
		var b bytes.Buffer
		if err := view.WriteTrace(&b, res.Plan); err != nil {
			return nil, err
		}
		outs = append(outs, output.Bytes("--trace", f.trace, b.Bytes()))
	}
	return outs, nil
}

// outputs are the picture files asked for, before they are drawn, for
// output.Run.Check.
func (f *viewFlags) outputs() []output.File {
	return []output.File{{What: "--dot", Path: f.dot}, {What: "--svg", Path: f.svg}, {What: "--png", Path: f.png}, {What: "--trace", Path: f.trace}}
}

// viewHelp is the plan command's help on its pictures.
var viewHelp = strings.TrimSpace(`
Pictures: --dot writes a Graphviz view, --svg and --png render it with
Graphviz's dot (installed separately), --trace writes the simulated step for
ui.perfetto.dev or chrome://tracing. The default view (--dot-detail module)
stays small whatever the model's size: devices, or stages with their replicas,
as clusters; inside them blocks of consecutive ops of one module path and
phase, with their op count, time and memory; edges labelled with what crosses
devices; the critical path in red.`)
