package profile

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/train"
)

// A torch.profiler trace of a training step has, after the forward's aten
// ops, the backward pass as autograd backward functions (one
// "autograd::engine::evaluate_function: <Name>Backward0" range each, its
// aten ops inside) and the optimizer's ranges (Optimizer.step#Adam.step,
// aten::_foreach_* inside). opplace's training step (train.Build) has a
// "<op>/grad" op of type "<Type>Grad" per forward op and one update op per
// parameter. The forward maps as an inference trace does (atenmap.go).
// The autograd engine runs backward functions in decreasing sequence
// number, the reverse of the order the forward created them, so the
// backward functions reversed are in forward order: they are aligned with
// the forward ops the same way, by type (ConvolutionBackward0 as
// aten::convolution), and each one's time goes to the gradient ops of the
// forward ops it aligned with. The optimizer's ranges, and the
// AccumulateGrad functions that hand weight gradients to it, are spread
// over the update ops by their roofline estimates: torch.optim's foreach
// kernels each update many parameters, so no kernel belongs to one.

// Phases of a training step's trace.
const (
	PhaseForward   = "forward"
	PhaseBackward  = "backward"
	PhaseOptimizer = "optimizer"
)

// tracePhase is the phase of a training trace's entry.
func tracePhase(name string) string {
	switch {
	case strings.HasPrefix(name, backwardPrefix+accumulateGrad), strings.HasPrefix(name, optimizerStep), strings.HasPrefix(name, optimizerZero):
		return PhaseOptimizer
	case strings.HasPrefix(name, backwardPrefix):
		return PhaseBackward
	}
	return PhaseForward
}

// trainRuns is each run's forward aten ops (top-level, outside the
// backward and optimizer ranges), backward functions and optimizer ranges,
// in order of start, timed.
func (k *kinetoTrace) trainRuns() [][]atenOp {
	evs := k.topOps(true)
	for _, s := range k.spans {
		s.dur = k.time(s)
		evs = append(evs, s)
	}
	slices.SortStableFunc(evs, func(a, b kinetoEv) int {
		if a.ts != b.ts {
			if a.ts < b.ts {
				return -1
			}
			return 1
		}
		return 0
	})
	return k.split(evs)
}

// traceOptimizer is the optimizer of a training trace: name when given
// (an optimizer name train.ParseOptimizer reads), else the class its
// Optimizer.step#<Class>.step range names (Adam and AdamW: adam; SGD:
// sgd, which cannot tell momentum from plain SGD), else adam.
func traceOptimizer(k *kinetoTrace, name string) (train.Optimizer, error) {
	if name != "" {
		return train.ParseOptimizer(name)
	}
	for _, s := range k.spans {
		cls, ok := strings.CutPrefix(s.name, optimizerStep)
		if !ok {
			continue
		}
		cls, _, _ = strings.Cut(cls, ".")
		switch strings.ToLower(cls) {
		case "adam", "adamw", "fusedadam":
			return train.Adam, nil
		case "sgd":
			return train.SGD, nil
		}
		return train.Optimizer{}, fmt.Errorf("the trace's optimizer %s is none opplace models (sgd, momentum, adam): name the closest", cls)
	}
	return train.Adam, nil
}

// backwardAten names a backward function by the aten op whose backward it
// is, as the forward's alignment reads it: "autograd::engine::
// evaluate_function: ConvolutionBackward0" -> "aten::convolution".
func backwardAten(name string) string {
	n := strings.TrimPrefix(name, backwardPrefix)
	n = strings.TrimRightFunc(n, unicode.IsDigit)
	n = strings.TrimSuffix(n, "Backward")
	if a, ok := backwardNames[n]; ok {
		return "aten::" + a
	}
	// ReluBackward0 -> relu, GeluBackward0 -> gelu: the lower-cased name
	// is the aten op (and matches the ONNX type case-insensitively).
	return "aten::" + strings.ToLower(n)
}

// backwardNames are the backward functions whose aten op is not their
// name lower-cased.
var backwardNames = map[string]string{
	"Convolution": "convolution", "CudnnConvolution": "convolution", "ConvolutionBackwardOverrideable": "convolution",
	"Addmm": "addmm", "Mm": "mm", "Bmm": "bmm", "T": "t",
	"Threshold": "relu", "Hardtanh": "hardtanh",
	"NativeBatchNorm": "batch_norm", "CudnnBatchNorm": "batch_norm", "MiopenBatchNorm": "batch_norm",
	"NativeLayerNorm": "layer_norm", "Softmax": "_softmax", "LogSoftmax": "log_softmax",
	"MaxPool2DWithIndices": "max_pool2d", "AvgPool2D": "avg_pool2d", "AdaptiveAvgPool2D": "adaptive_avg_pool2d",
	"Mean": "mean", "View": "view", "ReshapeAlias": "view", "UnsafeView": "view",
	"Transpose": "transpose", "Permute": "permute", "Embedding": "embedding", "EmbeddingDense": "embedding",
	"Split": "split", "SplitWithSizes": "split", "UnsafeSplit": "split", "Cat": "cat", "Stack": "stack",
	"ToCopy": "_to_copy", "Clone": "clone", "NativeDropout": "native_dropout",
	"ScaledDotProductEfficientAttention": "scaled_dot_product_attention",
	"ScaledDotProductFlashAttention":     "scaled_dot_product_attention",
}

// trainKernels maps a training step's runs onto g, the training graph
// train.Build made: forward aten ops onto forward ops, backward functions
// onto gradient ops, optimizer ranges onto update ops.
func trainKernels(g *graph.Graph, dt *DeviceType, runs [][]atenOp) []*traceKernel {
	est := opEstimates(g, dt)
	seq := alignSeq(g)
	grads := map[graph.OpID]graph.OpID{}
	var updates []graph.OpID
	for i := range g.Ops {
		op := &g.Ops[i]
		switch op.Phase {
		case graph.Backward:
			if f, ok := g.OpByName(strings.TrimSuffix(op.Name, "/grad")); ok {
				grads[f] = graph.OpID(i)
			}
		case graph.Update:
			updates = append(updates, graph.OpID(i))
		}
	}
	return mergeRuns(runs, func(run []atenOp) []*target {
		targets := make([]*target, len(run))
		var fwd, bwd []atenOp
		var fi, bi []int
		for i, a := range run {
			switch tracePhase(a.name) {
			case PhaseOptimizer:
				targets[i] = spreadOver(est, updates)
			case PhaseBackward:
				bwd = append(bwd, atenOp{backwardAten(a.name), a.dur})
				bi = append(bi, i)
			default:
				fwd = append(fwd, a)
				fi = append(fi, i)
			}
		}
		for j, t := range alignAten(g, est, seq, fwd) {
			targets[fi[j]] = t
		}
		slices.Reverse(bwd)
		slices.Reverse(bi)
		for j, t := range alignAten(g, est, seq, bwd) {
			var ids []graph.OpID
			for _, f := range t.ops {
				if gr, ok := grads[f]; ok {
					ids = append(ids, gr)
				}
			}
			targets[bi[j]] = spreadOver(est, ids)
		}
		return targets
	})
}

// PhaseTime is one phase's GPU time in a training trace, per run.
type PhaseTime struct {
	Phase string
	// MS is the phase's time; MatchedMS the part mapped to ops.
	MS, MatchedMS float64
}
