package costedtest

import (
	"fmt"
	"math"

	"github.com/opplace/opplace/costed"
)

// The random layered DAG: the shape list-scheduling papers test placers
// on (Baechi's m-ETF and m-SCT among them), without the regularity of a
// transformer.
const (
	// LayeredDeviceType is the device type name Layered gives times for by
	// default; testdata/clusters/{4,8}xSynth*.yaml declare it.
	LayeredDeviceType = "SynthGPU"
	// LayeredWidth is the default number of ops per layer.
	LayeredWidth = 6
	// LayeredMedianMS and LayeredSigma make op times lognormal: the
	// median time in milliseconds and the standard deviation of its
	// logarithm. With sigma 0.5 the middle 95% of ops take 90 to 640 µs.
	LayeredMedianMS = 0.240
	LayeredSigma    = 0.5
	// An op has 1 to LayeredMaxFanIn inputs from the layer before it.
	LayeredMaxFanIn = 3
	// LayeredSkip is the chance that an op of layer 2 or later also
	// reads an op of an earlier layer, at most LayeredSkipReach layers
	// before its own (a residual-style skip connection).
	LayeredSkip      = 0.1
	LayeredSkipReach = 4
	// Each op holds LayeredMinParam to LayeredMaxParam bytes of parameters
	// and writes LayeredMinOutput to LayeredMaxOutput bytes, uniformly.
	LayeredMinParam  = 1 << 20
	LayeredMaxParam  = 64 << 20
	LayeredMinOutput = 1 << 20
	LayeredMaxOutput = 32 << 20
)

// LayeredConfig says which layered DAG to generate. Zero fields take the
// defaults above.
type LayeredConfig struct {
	// Ops is the exact number of ops, at least 1.
	Ops int
	// Width is the number of ops per layer; the last layer holds the
	// remainder.
	Width int
	// Seed makes the graph: one seed, one graph, on every machine.
	Seed uint64
	// DeviceType names the one device type every op gets a time for.
	DeviceType string
}

func (c LayeredConfig) withDefaults() LayeredConfig {
	if c.Width <= 0 {
		c.Width = LayeredWidth
	}
	if c.DeviceType == "" {
		c.DeviceType = LayeredDeviceType
	}
	return c
}

// LayeredName is the name of op i of a graph of the given width: its
// layer and its place in the layer, so a reader (and the tests) can see
// the structure in any plan.
func LayeredName(i, width int) string { return fmt.Sprintf("L%d.%d", i/width, i%width) }

// Layered makes a random layered DAG as a costed forward graph: layer 0
// reads nothing; every op of layer k >= 1 reads 1 to LayeredMaxFanIn
// distinct ops of layer k-1, and with chance LayeredSkip one op of layers
// k-LayeredSkipReach to k-2 as well. Every op but those of the last
// layer feeds at least one op of the next layer where that layer has room
// for another input (so the graph's outputs are, in practice, its last
// layer). Times are lognormal (LayeredMedianMS, LayeredSigma), rounded to
// 0.1 µs; parameters and outputs are uniform in their ranges; no op needs
// scratch memory. Every edge carries its producer's whole output.
func Layered(cfg LayeredConfig) (*costed.File, error) {
	cfg = cfg.withDefaults()
	if cfg.Ops < 1 {
		return nil, fmt.Errorf("costedtest: a layered graph needs at least 1 op, %d asked", cfg.Ops)
	}
	rng := splitmix64(cfg.Seed)
	w := cfg.Width
	inputs := layeredInputs(&rng, cfg.Ops, w)
	f := &costed.File{
		Format: costed.FormatV1,
		Name:   fmt.Sprintf("layered-%d-w%d-seed%d", cfg.Ops, w, cfg.Seed),
		Ops:    make([]costed.Op, cfg.Ops),
	}
	for i := range f.Ops {
		ms := LayeredMedianMS * math.Exp(LayeredSigma*rng.normal())
		f.Ops[i] = costed.Op{
			Name:        LayeredName(i, w),
			Type:        "Layer",
			TimesMS:     costed.Times{{Type: cfg.DeviceType, MS: math.Round(ms*1e4) / 1e4}},
			ParamBytes:  rng.between(LayeredMinParam, LayeredMaxParam),
			OutputBytes: rng.between(LayeredMinOutput, LayeredMaxOutput),
		}
		for _, in := range inputs[i] {
			f.Edges = append(f.Edges, costed.Edge{From: LayeredName(in, w), To: f.Ops[i].Name})
		}
	}
	return f, nil
}

// layeredInputs draws the structure: inputs[i] lists op i's producers,
// those of the previous layer ascending, then its skip input if any.
func layeredInputs(rng *splitmix64, n, w int) [][]int {
	inputs := make([][]int, n)
	for first := w; first < n; first += w {
		layer := first / w
		prev := first - w // the previous layer is full: it is not the last
		size := min(w, n-first)
		fed := make([]bool, w)
		for i := first; i < first+size; i++ {
			k := 1 + rng.intn(min(LayeredMaxFanIn, w))
			for _, j := range rng.sample(w, k) {
				inputs[i] = append(inputs[i], prev+j)
				fed[j] = true
			}
		}
		// An op of the previous layer nothing reads joins an op of this
		// layer that has room, so intermediate results do not stay alive
		// to the end of the step as graph outputs.
		for j, ok := range fed {
			if ok {
				continue
			}
			var room []int
			for i := first; i < first+size; i++ {
				if len(inputs[i]) < LayeredMaxFanIn {
					room = append(room, i)
				}
			}
			if len(room) == 0 {
				continue
			}
			i := room[rng.intn(len(room))]
			inputs[i] = insertSorted(inputs[i], prev+j)
		}
		if layer < 2 {
			continue
		}
		for i := first; i < first+size; i++ {
			if rng.float() >= LayeredSkip {
				continue
			}
			lo := max(0, layer-LayeredSkipReach)
			span := (layer - 1 - lo) * w // layers lo..layer-2, all full
			inputs[i] = append(inputs[i], lo*w+rng.intn(span))
		}
	}
	return inputs
}

// insertSorted adds v to the ascending list s.
func insertSorted(s []int, v int) []int {
	k := 0
	for k < len(s) && s[k] < v {
		k++
	}
	s = append(s, 0)
	copy(s[k+1:], s[k:])
	s[k] = v
	return s
}

// float is uniform in [0, 1).
func (s *splitmix64) float() float64 { return float64(s.next()>>11) / (1 << 53) }

// intn is uniform in [0, n); the modulo bias is below 2^-40 for the
// small n used here.
func (s *splitmix64) intn(n int) int { return int(s.next() % uint64(n)) }

// between is uniform in [lo, hi].
func (s *splitmix64) between(lo, hi int64) int64 { return lo + int64(s.next()%uint64(hi-lo+1)) }

// sample returns k distinct values of [0, n), ascending (Floyd's
// algorithm: k draws, whatever n).
func (s *splitmix64) sample(n, k int) []int {
	chosen := make([]bool, n)
	for j := n - k; j < n; j++ {
		t := s.intn(j + 1)
		if chosen[t] {
			t = j
		}
		chosen[t] = true
	}
	out := make([]int, 0, k)
	for v, ok := range chosen {
		if ok {
			out = append(out, v)
		}
	}
	return out
}

// normal is a standard normal deviate (Box-Muller, one of the pair).
func (s *splitmix64) normal() float64 {
	u1 := 1 - s.float() // (0, 1]: the logarithm stays finite
	u2 := s.float()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
