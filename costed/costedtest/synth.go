// Package costedtest generates synthetic costed training graphs of any
// size, deterministic from a seed, for benchmarks and scale tests: the
// graphs a profiler would give for a deep transformer's training step.
//
// A graph is an embedding, a stack of transformer layers, a final norm,
// an output projection and a loss (the forward pass); one gradient op per
// forward op in reverse (the backward pass, reading the gradients of the
// op's consumers and the activations the op saved); and one optimizer op
// per weight (the update). Each layer is LayerNorm, a QKV projection
// fanning out to Heads parallel attention ops gathered by a Concat, an
// output projection, a residual Add, LayerNorm, an MLP (MatMul, Gelu,
// MatMul) and a residual Add: fan-in and fan-out as in real training
// graphs, long edges from forward activations to their gradient ops, and
// a layer, its gradient and its update colocated.
//
// Sizes are scaled so the whole graph holds Config.ParamBytes of weights
// and Config.ActivationBytes of forward activations whatever its op count,
// so a graph of a million ops still fits a small cluster. Times are per
// device type, from a per-op compute and memory-traffic part divided by
// each type's relative speed, so types differ per op as they do on real
// hardware (matrix products gain more from an A100 than elementwise ops).
package costedtest

import (
	"fmt"
	"math"

	"github.com/opplace/opplace/costed"
)

// DeviceType is a device type the generated times cover.
type DeviceType struct {
	// Name as cluster files spell it.
	Name string
	// Compute and Memory are the type's speed relative to a V100 on
	// compute-bound and on memory-bound work.
	Compute, Memory float64
}

// DefaultDeviceTypes covers every type of the bundled clusters, with
// speeds from their datasheets (fp16 tensor FLOP/s and memory bandwidth
// relative to a V100).
var DefaultDeviceTypes = []DeviceType{
	{Name: "V100-16GB", Compute: 1, Memory: 1},
	{Name: "A100-40GB", Compute: 2.5, Memory: 1.73},
	{Name: "A100-40GB-PCIe", Compute: 2.5, Memory: 1.73},
	{Name: "A100-80GB", Compute: 2.5, Memory: 2.27},
	{Name: "T4", Compute: 0.52, Memory: 0.36},
	{Name: "Workstation-CPU", Compute: 0.008, Memory: 0.156},
}

// Config says what to generate. Zero fields take the defaults below.
type Config struct {
	// Ops is the exact number of ops; at least MinOps(Heads).
	Ops int
	// Seed makes the graph: one seed, one graph, on every machine.
	Seed uint64
	// Heads is the number of parallel attention ops per layer (default 4).
	Heads int
	// ParamBytes is the total size of the weights (default 1 GiB).
	ParamBytes int64
	// ActivationBytes is the total size of the forward activations
	// (default 2 GiB).
	ActivationBytes int64
	// DeviceTypes get a time for every op (default DefaultDeviceTypes).
	DeviceTypes []DeviceType
}

func (c Config) withDefaults() Config {
	if c.Heads <= 0 {
		c.Heads = 4
	}
	if c.ParamBytes <= 0 {
		c.ParamBytes = 1 << 30
	}
	if c.ActivationBytes <= 0 {
		c.ActivationBytes = 2 << 30
	}
	if len(c.DeviceTypes) == 0 {
		c.DeviceTypes = DefaultDeviceTypes
	}
	return c
}

// Per layer: 10 forward ops besides the heads, each with its gradient,
// and 6 weights, each with its update.
const (
	layerFixedForward = 10
	layerWeights      = 6
	// The embedding, final norm, output projection and loss, their
	// gradients, and the updates of the first three.
	outerOps = 4*2 + 3
)

func layerOps(heads int) int { return 2*(layerFixedForward+heads) + layerWeights }

// MinOps is the smallest graph Generate makes for a number of heads (0
// for the default): the outer ops and one layer.
func MinOps(heads int) int {
	if heads <= 0 {
		heads = 4
	}
	return outerOps + layerOps(heads)
}

// splitmix64 is the generator: a fixed algorithm, so a seed gives the
// same graph on every Go version.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// jitter is a factor uniform in [1-f, 1+f].
func (s *splitmix64) jitter(f float64) float64 {
	return 1 + f*(2*float64(s.next()>>11)/(1<<53)-1)
}

// kind is what an op computes, for its cost. Its time on a V100 is the
// memory traffic (output written twice, weights read once) at 900 GB/s,
// plus intensity times that for the arithmetic: matrix products are
// compute-bound, elementwise ops are not.
type kind struct {
	typ       string
	intensity float64
	weights   bool
	// saves: the gradient reads the op's inputs (a product, a norm,
	// a nonlinearity); an Add's gradient needs only the incoming one.
	saves bool
}

var (
	kEmbed  = kind{"Gather", 0, true, true}
	kNorm   = kind{"LayerNorm", 0.5, true, true}
	kMatMul = kind{"MatMul", 8, true, true}
	kAttn   = kind{"Attention", 4, false, true}
	kConcat = kind{"Concat", 0, false, false}
	kAdd    = kind{"Add", 0, false, false}
	kGelu   = kind{"Gelu", 0.3, false, true}
	kLoss   = kind{"SoftmaxCrossEntropy", 1, false, true}
	kMetric = kind{"ReduceMean", 0, false, false}
	kAdam   = kind{"Adam", 0.2, false, false}
)

type fwdOp struct {
	name   string
	k      kind
	inputs []int
	// consumers are filled as later ops read this one.
	consumers []int
	outBytes  int64
}

// Generate makes the graph described by cfg.
func Generate(cfg Config) (*costed.File, error) {
	cfg = cfg.withDefaults()
	if min := MinOps(cfg.Heads); cfg.Ops < min {
		return nil, fmt.Errorf("costedtest: %d ops asked, but a graph of %d heads per layer has at least %d", cfg.Ops, cfg.Heads, min)
	}
	layers := (cfg.Ops - outerOps) / layerOps(cfg.Heads)
	metrics := cfg.Ops - outerOps - layers*layerOps(cfg.Heads)
	rng := splitmix64(cfg.Seed)

	// The forward pass, as a list; gradients and updates follow from it.
	var fwd []fwdOp
	add := func(name string, k kind, inputs ...int) int {
		id := len(fwd)
		fwd = append(fwd, fwdOp{name: name, k: k, inputs: inputs})
		for _, in := range inputs {
			fwd[in].consumers = append(fwd[in].consumers, id)
		}
		return id
	}
	x := add("embed", kEmbed)
	for l := range layers {
		p := fmt.Sprintf("L%d/", l)
		ln1 := add(p+"ln1", kNorm, x)
		qkv := add(p+"qkv", kMatMul, ln1)
		heads := make([]int, cfg.Heads)
		for h := range heads {
			heads[h] = add(fmt.Sprintf("%shead%d", p, h), kAttn, qkv)
		}
		cat := add(p+"concat", kConcat, heads...)
		proj := add(p+"proj", kMatMul, cat)
		res1 := add(p+"add1", kAdd, x, proj)
		ln2 := add(p+"ln2", kNorm, res1)
		fc1 := add(p+"fc1", kMatMul, ln2)
		gelu := add(p+"gelu", kGelu, fc1)
		fc2 := add(p+"fc2", kMatMul, gelu)
		x = add(p+"add2", kAdd, res1, fc2)
	}
	lnf := add("lnf", kNorm, x)
	head := add("head", kMatMul, lnf)
	loss := add("loss", kLoss, head)
	// Metrics read the loss and nothing reads them: they make the op
	// count exact without changing the step's structure.
	firstMetric := len(fwd)
	for i := range metrics {
		add(fmt.Sprintf("metric%d", i), kMetric, loss)
	}

	nWeights := 0
	for i := range fwd {
		if fwd[i].k.weights {
			nWeights++
		}
	}
	meanParam := float64(cfg.ParamBytes) / float64(nWeights)
	meanAct := float64(cfg.ActivationBytes) / float64(firstMetric)

	f := &costed.File{Format: costed.FormatV1, Name: fmt.Sprintf("synth-%d-seed%d", cfg.Ops, cfg.Seed)}
	f.Ops = make([]costed.Op, 0, cfg.Ops)
	// times gives an op's time on every type for traffic bytes moved.
	times := func(k kind, traffic int64) costed.Times {
		m := float64(traffic) / 9e8 * rng.jitter(0.3)
		c := m * k.intensity * rng.jitter(0.3)
		t := make(costed.Times, len(cfg.DeviceTypes))
		for i, dt := range cfg.DeviceTypes {
			// 5 µs of launch overhead; the rest split by the type's
			// speeds, with a little noise per type as measurements have.
			ms := 0.005 + (c/dt.Compute+m/dt.Memory)*rng.jitter(0.1)
			t[i] = costed.DeviceTime{Type: dt.Name, MS: math.Round(ms*1e4) / 1e4}
		}
		return t
	}
	bytesAbout := func(mean float64) int64 { return int64(mean * rng.jitter(0.5)) }
	paramOf := make([]int64, len(fwd))
	for i := range fwd {
		op := &fwd[i]
		colocate := ""
		var params int64
		if op.k.weights {
			colocate = op.name
			params = bytesAbout(meanParam)
			paramOf[i] = params
		}
		out := bytesAbout(meanAct)
		if i >= firstMetric {
			out = 4
		}
		op.outBytes = out
		var temp int64
		if op.k == kMatMul || op.k == kAttn {
			temp = out / 2
		}
		f.Ops = append(f.Ops, costed.Op{Name: op.name, Type: op.k.typ, Colocate: colocate,
			TimesMS: times(op.k, 2*out+params), ParamBytes: params, OutputBytes: out, TempBytes: temp})
		for _, in := range op.inputs {
			f.Edges = append(f.Edges, costed.Edge{From: fwd[in].name, To: op.name})
		}
	}
	// The backward pass in reverse: the gradient of an op reads the
	// gradients of its consumers (the loss's reads the loss) and, if the
	// op saved them, its inputs. Metrics have no gradient.
	for i := firstMetric - 1; i >= 0; i-- {
		op := &fwd[i]
		g := op.name + "_grad"
		colocate := ""
		if op.k.weights {
			colocate = op.name
		}
		var out int64 // the gradient of the op's input: the size of that input
		for _, in := range op.inputs {
			out += fwd[in].outBytes
		}
		f.Ops = append(f.Ops, costed.Op{Name: g, Type: op.k.typ + "Grad", Phase: "backward", Colocate: colocate,
			TimesMS: times(op.k, 2*(2*out+paramOf[i])), OutputBytes: out, TempBytes: out / 4})
		if i == loss {
			f.Edges = append(f.Edges, costed.Edge{From: op.name, To: g})
		}
		for _, c := range op.consumers {
			if c < firstMetric {
				f.Edges = append(f.Edges, costed.Edge{From: fwd[c].name + "_grad", To: g})
			}
		}
		if op.k.saves {
			for _, in := range op.inputs {
				f.Edges = append(f.Edges, costed.Edge{From: fwd[in].name, To: g})
			}
		}
	}
	// Updates, in forward order: each reads its weight's gradient, an
	// edge of the weight's size.
	for i := range fwd[:firstMetric] {
		op := &fwd[i]
		if !op.k.weights {
			continue
		}
		u := op.name + "_update"
		// Adam keeps two moments of the weight's size.
		f.Ops = append(f.Ops, costed.Op{Name: u, Type: kAdam.typ, Phase: "update", Colocate: op.name,
			TimesMS: times(kAdam, 4*paramOf[i]), ParamBytes: 2 * paramOf[i]})
		b := paramOf[i]
		f.Edges = append(f.Edges, costed.Edge{From: op.name + "_grad", To: u, Bytes: &b})
	}
	return f, nil
}
