package profile

import (
	"slices"
	"strings"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
)

// A PyTorch profiler trace of the module the model was exported from
// times aten ops ("aten::conv2d", "aten::linear"), not ONNX nodes, and
// without Kineto (a CPU-only build) names no module either. The exporter
// traced the same forward in the same order, so the trace's top-level
// aten ops, in order, align with the model's kernel ops, in order, by
// type: an edit-distance alignment where an aten op matches an op of a
// type it exports to, ONNX ops left between two matches belong to the
// aten op before them (aten::linear -> MatMul, Add; aten::gelu -> Div,
// Erf, Add, Mul, Mul), and aten ops the export folds away (batch_norm
// into the convolution before it) give their time to the aten op before
// them.

// atenTypes lists the ONNX op types an aten op exports to, besides the
// one its own name spells (aten::erf -> Erf).
var atenTypes = map[string][]string{
	"conv1d": {"Conv"}, "conv2d": {"Conv"}, "conv3d": {"Conv"}, "convolution": {"Conv"}, "_convolution": {"Conv"},
	"conv_transpose2d": {"ConvTranspose"},
	"batch_norm":       {"BatchNormalization"},
	"add":              {"Add"}, "sub": {"Sub"}, "mul": {"Mul"}, "div": {"Div"}, "rsub": {"Sub"},
	"max_pool2d": {"MaxPool"}, "avg_pool2d": {"AveragePool"},
	"adaptive_avg_pool2d": {"GlobalAveragePool", "AveragePool", "ReduceMean"},
	"mean":                {"ReduceMean", "GlobalAveragePool"},
	"flatten":             {"Flatten", "Reshape"}, "view": {"Reshape"}, "_reshape_alias": {"Reshape"},
	"linear": {"Gemm", "MatMul"}, "addmm": {"Gemm", "MatMul"}, "matmul": {"MatMul", "Gemm"}, "bmm": {"MatMul"}, "mm": {"MatMul", "Gemm"},
	"layer_norm": {"LayerNormalization"}, "softmax": {"Softmax"}, "_softmax": {"Softmax"}, "log_softmax": {"LogSoftmax"},
	"gelu":      {"Gelu", "Div", "Mul"},
	"transpose": {"Transpose"}, "permute": {"Transpose"}, "t": {"Transpose"},
	"split": {"Split"}, "chunk": {"Split"}, "split_with_sizes": {"Split"}, "unsafe_split": {"Split"},
	"embedding": {"Gather"}, "select": {"Gather"}, "index_select": {"Gather"}, "cat": {"Concat"}, "stack": {"Concat"},
	"hardtanh": {"Clip"}, "relu6": {"Clip"}, "clamp": {"Clip"}, "silu": {"Sigmoid", "Mul"},
	"dropout": {"Dropout", "Identity"}, "triu": {"Trilu"}, "tril": {"Trilu"},
	"scaled_dot_product_attention": {"MatMul"}, "masked_fill": {"Where"},
}

// atenFolds are aten ops an inference export folds into the op before
// them (batch_norm into the convolution).
var atenFolds = map[string]bool{"batch_norm": true, "dropout": true, "feature_dropout": true, "contiguous": true,
	// A training step's casts and copies (autocast's, a backward's
	// ToCopyBackward0) and its dropout.
	"_to_copy": true, "to": true, "clone": true, "native_dropout": true}

// atenName is an aten op's name without the namespace and the in-place
// underscore: "aten::relu_" -> "relu".
func atenName(name string) string {
	n := strings.TrimPrefix(name, "aten::")
	if n != "_" && strings.HasSuffix(n, "_") && !strings.HasPrefix(n, "_") {
		n = strings.TrimSuffix(n, "_")
	}
	return n
}

// atenMatch is the cost of aten op aten computing op id, -1 when it
// cannot: 0 for a type it exports to, but 3 (more than leaving both
// unmatched) for aten::add on a linear layer's bias Add (an Add of a
// weight and a MatMul's output), which the aten::linear before it
// computes.
func atenMatch(g *graph.Graph, aten string, id graph.OpID) int32 {
	op := &g.Ops[id]
	if !strings.EqualFold(aten, op.Type) && !slices.Contains(atenTypes[aten], op.Type) {
		return -1
	}
	if aten == "add" && op.Type == "Add" && len(op.Inputs) == 2 {
		weight, matmul := false, false
		for _, t := range op.Inputs {
			tt := &g.Tensors[t]
			weight = weight || tt.Kind == graph.Parameter || tt.Kind == graph.Constant
			matmul = matmul || tt.Producer != graph.NoOp && g.Ops[tt.Producer].Type == "MatMul"
		}
		if weight && matmul {
			return 3
		}
	}
	return 0
}

// atenOp is one top-level aten op of one run.
type atenOp struct {
	name string
	dur  float64
}

// atenKernels aligns each run's aten ops with g's ops and returns them
// as trace kernels with their targets (mergeRuns).
func atenKernels(g *graph.Graph, dt *DeviceType, runs [][]atenOp) []*traceKernel {
	est := opEstimates(g, dt)
	seq := alignSeq(g)
	return mergeRuns(runs, func(run []atenOp) []*target { return alignAten(g, est, seq, run) })
}

// alignSeq is g's forward ops in order, what aten ops align with.
// Shape arithmetic stays in: PyTorch may run it as aten ops too.
func alignSeq(g *graph.Graph) []graph.OpID {
	var seq []graph.OpID
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Type != "Identity" && op.Type != "Constant" && op.Phase == graph.Forward {
			seq = append(seq, graph.OpID(i))
		}
	}
	return seq
}

// mergeRuns turns runs of timed trace entries into trace kernels with
// the targets targets gives a run: kernel i of a run is its i-th entry;
// runs whose entry names differ from the first run's get kernels of
// their own.
func mergeRuns(runs [][]atenOp, targets func([]atenOp) []*target) []*traceKernel {
	var kernels []*traceKernel
	var first []*traceKernel
	for r, run := range runs {
		same := first != nil && len(run) == len(first)
		for i := 0; same && i < len(run); i++ {
			same = run[i].name == first[i].name
		}
		if same {
			for i, a := range run {
				for len(first[i].durs) < r {
					first[i].durs = append(first[i].durs, 0)
				}
				first[i].durs = append(first[i].durs, a.dur)
				first[i].events++
			}
			continue
		}
		ts := targets(run)
		ks := make([]*traceKernel, len(run))
		for i, a := range run {
			durs := make([]float64, r+1)
			durs[r] = a.dur
			ks[i] = &traceKernel{name: a.name, opType: a.name, durs: durs, events: 1, target: ts[i]}
		}
		kernels = append(kernels, ks...)
		if first == nil {
			first = ks
		}
	}
	return kernels
}

// maxAlignCells bounds the alignment's table (one byte a cell): a run of
// more aten ops times model ops than this is left unmapped.
const maxAlignCells = 1 << 27

// alignAten maps one run's aten ops onto seq (g's ops in order) and
// returns each aten op's target.
func alignAten(g *graph.Graph, est []float64, seq []graph.OpID, run []atenOp) []*target {
	n, m := len(run), len(seq)
	// Costs: a match atenMatch, an ONNX op left unmatched 2 (it joins
	// the aten op before it), an aten op left unmatched 2, or 1 for one
	// the export folds away. On ties an aten op takes the earliest op it
	// may, so the ops after it (gelu's Erf, Add, Mul) join it.
	const skipONNX, skipAten, skipFold = 2, 2, 1
	w := m + 1
	if (n+1)*w > maxAlignCells {
		targets := make([]*target, n)
		for i := range targets {
			targets[i] = &target{shapeOp: -1}
		}
		return targets
	}
	// Two rows of costs; the moves are kept for the walk back.
	prev, cur := make([]int32, w), make([]int32, w)
	move := make([]uint8, (n+1)*w) // 1 match, 2 skip aten, 3 skip onnx
	names := make([]string, n)
	for i := range run {
		names[i] = atenName(run[i].name)
	}
	for j := 1; j <= m; j++ {
		prev[j] = int32(j * skipONNX)
		move[j] = 3
	}
	for i := 1; i <= n; i++ {
		sa := int32(skipAten)
		if atenFolds[names[i-1]] {
			sa = skipFold
		}
		cur[0] = prev[0] + sa
		move[i*w] = 2
		for j := 1; j <= m; j++ {
			best, mv := prev[j]+sa, uint8(2)
			if mc := atenMatch(g, names[i-1], seq[j-1]); mc >= 0 {
				if c := prev[j-1] + mc; c <= best {
					best, mv = c, 1
				}
			}
			if c := cur[j-1] + skipONNX; c <= best {
				best, mv = c, 3
			}
			cur[j], move[i*w+j] = best, mv
		}
		prev, cur = cur, prev
	}
	// Walk back: owned[i] lists the ONNX ops aten op i computes.
	owned := make([][]graph.OpID, n)
	matched := make([]bool, n)
	var pending []graph.OpID // ONNX ops after the current aten op's match
	for i, j := n, m; i > 0 || j > 0; {
		switch move[i*w+j] {
		case 1:
			owned[i-1] = append([]graph.OpID{seq[j-1]}, pending...)
			matched[i-1] = true
			pending = nil
			i, j = i-1, j-1
		case 2:
			i--
		default:
			pending = append([]graph.OpID{seq[j-1]}, pending...)
			j--
		}
	}
	targets := make([]*target, n)
	last := -1
	for i := range run {
		switch {
		case matched[i]:
			last = i
			targets[i] = spreadOver(est, owned[i])
		case atenFolds[names[i]] && last >= 0:
			targets[i] = spreadOver(est, owned[last])
		default:
			targets[i] = &target{shapeOp: -1}
		}
	}
	return targets
}

// opEstimates is each op's roofline time on dt without launch overhead,
// what a fused kernel's time is split by.
func opEstimates(g *graph.Graph, dt *DeviceType) []float64 {
	est := make([]float64, len(g.Ops))
	cdt := dt.Cluster()
	r := cost.Roofline{}
	for i := range g.Ops {
		if Family(g.Ops[i].Type) != FamilyView {
			est[i] = max(r.ComputeTime(g, graph.OpID(i), cdt), r.MemoryTime(g, graph.OpID(i), cdt))
		}
	}
	return est
}

// spreadOver splits a kernel's time over ops in proportion to est; ops
// estimated at zero get nothing unless all are zero, then all share
// evenly.
func spreadOver(est []float64, ops []graph.OpID) *target {
	t := &target{shapeOp: -1}
	if len(ops) == 0 {
		return t
	}
	t.shapeOp = ops[len(ops)-1]
	var sum float64
	for _, id := range ops {
		sum += est[id]
	}
	for _, id := range ops {
		w := 1 / float64(len(ops))
		if sum > 0 {
			w = est[id] / sum
		}
		if w > 0 {
			t.ops = append(t.ops, id)
			t.weight = append(t.weight, w)
		}
	}
	return t
}
