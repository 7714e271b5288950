package pipeline

import (
	"fmt"
	"strings"

	"github.com/opplace/opplace/graph"
)

// Runtime is what the user's runtime runs as kernels, which changes both
// an op's time and what a training step keeps in memory: which fusions
// exist (Options.Fusion's modes) and whether the attention core is one
// kernel (graph.FuseAttention).
type Runtime struct {
	Name string
	// Fusion is the fusion mode the runtime's kernels amount to.
	Fusion string
	// FusedAttention runs each attention core as one kernel that stores
	// no score matrix.
	FusedAttention bool
	// About says what the runtime is, for help texts and docs.
	About string
}

// RuntimeAuto is the default: Options.Fusion decides the fusion, and
// attention runs as the model file writes it.
const RuntimeAuto = "auto"

// Runtimes are the runtimes Options.Runtime names.
var Runtimes = []Runtime{
	{Name: "eager", Fusion: FusionNone,
		About: "PyTorch eager mode with attention written out: one kernel per op"},
	{Name: "eager-sdpa", Fusion: FusionNone, FusedAttention: true,
		About: "PyTorch eager mode calling scaled_dot_product_attention, whose FlashAttention or memory-efficient kernel runs the attention core as one kernel; one kernel per other op"},
	{Name: "compile", Fusion: FusionHybrid, FusedAttention: true,
		About: "torch.compile with Inductor: elementwise ops fused into each other and into matmul epilogues, attention as scaled_dot_product_attention's kernel"},
	{Name: "onnxruntime", Fusion: FusionHybrid,
		About: "ONNX Runtime's graph optimisations: elementwise fusions; attention as the file writes it, one kernel where the file carries an Attention or MultiHeadAttention op"},
	{Name: "xla", Fusion: FusionHybrid,
		About: "TensorFlow or JAX under XLA: elementwise fusions, attention written out"},
}

// RuntimeNames lists the accepted Options.Runtime values.
func RuntimeNames() []string {
	names := []string{RuntimeAuto}
	for _, rt := range Runtimes {
		names = append(names, rt.Name)
	}
	return names
}

// runtimeOf resolves Options.Runtime and Options.Fusion into one
// runtime: auto takes the fusion mode given (FusionAuto when none), a
// named runtime its own, and a fusion mode given beside a runtime that
// implies another is an error.
func runtimeOf(o Options) (Runtime, error) {
	fusion := o.Fusion
	if fusion == "" {
		fusion = FusionAuto
	}
	if o.Runtime == "" || o.Runtime == RuntimeAuto {
		return Runtime{Name: RuntimeAuto, Fusion: fusion}, nil
	}
	for _, rt := range Runtimes {
		if rt.Name != o.Runtime {
			continue
		}
		if fusion != FusionAuto && fusion != rt.Fusion {
			return Runtime{}, &InputError{fmt.Errorf("runtime %s runs fusion %s, not %s: give the runtime alone, or a fusion mode without a runtime", rt.Name, rt.Fusion, fusion)}
		}
		return rt, nil
	}
	return Runtime{}, &InputError{fmt.Errorf("unknown runtime %q: use %s", o.Runtime, strings.Join(RuntimeNames(), ", "))}
}

// fuseAttention runs graph.FuseAttention on the forward graph when the
// runtime has a fused attention kernel. A costed graph's measured times
// describe the kernels as they ran, so it is left as is, with a warning.
func fuseAttention(r *run) error {
	rt, err := runtimeOf(r.opts)
	if err != nil || !rt.FusedAttention {
		return err
	}
	if r.model.Costs != nil {
		r.model.Warnings = append(r.model.Warnings, fmt.Sprintf("runtime %s: the model file carries measured op times, which already say how attention ran; its attention is not re-fused", rt.Name))
		return nil
	}
	g, fused, err := graph.FuseAttention(r.model.Graph)
	if err != nil {
		return fmt.Errorf("%s: fusing attention: %w", r.opts.ModelPath, err)
	}
	if len(fused) == 0 {
		r.model.Warnings = append(r.model.Warnings, fmt.Sprintf("runtime %s: no attention core (Q·Kᵀ, scale, mask, Softmax, ·V) found to run as one kernel; the plan runs the model's ops as written", rt.Name))
		return nil
	}
	r.model.Graph = g
	r.attention = fused
	return nil
}

// runtimeName is the runtime a plan names: o's, or "" for the default.
func runtimeName(o Options) string {
	if rt, err := runtimeOf(o); err == nil && rt.Name != RuntimeAuto {
		return rt.Name
	}
	return ""
}
