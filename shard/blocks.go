package shard

import (
	"crypto/sha256"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
)

// region is a set of forward ops solved by one program: a repeated block
// (sig is its structural signature, shared by its identical copies) or
// the rest of the graph (sig "").
type region struct {
	ops []graph.OpID
	sig string
}

// inert reports whether op of region k is a constant of the region's
// program: it has only the replicated strategy and reads nothing an op
// of the region with a choice makes. Signatures leave inert ops out, so
// GPT-2's first block, which holds one extra constant its successors
// read, is still their twin.
func (p *problem) inert(op graph.OpID, k int) bool {
	if len(p.strats[op]) > 1 {
		return false
	}
	for _, x := range p.g.Ops[op].Inputs {
		if u := p.g.Tensors[x].Producer; u != graph.NoOp && p.region[u] == k && len(p.strats[u]) > 1 {
			return false
		}
	}
	return true
}

// vars are the ops of r that are not inert, in order: the ops a twin's
// choice is copied to.
func (p *problem) vars(r region) []graph.OpID {
	var v []graph.OpID
	for _, op := range r.ops {
		if !p.inert(op, p.region[op]) {
			v = append(v, op)
		}
	}
	return v
}

// regions cuts the forward ops into blocks by module (partition's
// ModuleKeys: a transformer's layers), keeps as blocks the modules whose
// structure repeats, and puts every other forward op into one last
// region. A block's inputs from outside are taken replicated and its
// outputs read outside must be made replicated, so blocks solve
// independently and a block's solution can be copied to its twins; the
// rest, solved as one, keeps its own inner patterns (a 2-layer MLP's
// column then row). It returns the regions (blocks in order of their
// first op, the rest last), the number of blocks and of distinct ones.
func (p *problem) regions() ([]region, int, int) {
	g := p.g
	keys := graph.ModuleKeys(g)
	byKey := map[string]int{}
	var groups [][]graph.OpID
	for i := range g.Ops {
		if g.Ops[i].Phase != graph.Forward || keys[i] == "" {
			continue
		}
		k, ok := byKey[keys[i]]
		if !ok {
			k = len(groups)
			byKey[keys[i]] = k
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], graph.OpID(i))
	}
	for k, ops := range groups {
		for _, op := range ops {
			p.region[op] = k
		}
	}
	sigs := make([]string, len(groups))
	count := map[string]int{}
	for k, ops := range groups {
		sigs[k] = p.signature(ops, k)
		count[sigs[k]]++
	}
	var out []region
	distinct := map[string]bool{}
	for k, ops := range groups {
		if count[sigs[k]] >= 2 {
			out = append(out, region{ops: ops, sig: sigs[k]})
			distinct[sigs[k]] = true
		}
	}
	blocks := len(out)
	if blocks > 0 {
		// A model of repeated blocks: a module that does not repeat
		// (a first block that owns weights the others share) is a
		// program of its own too, as small as theirs, instead of one
		// program with everything outside the blocks.
		for k, ops := range groups {
			if count[sigs[k]] < 2 {
				out = append(out, region{ops: ops})
			}
		}
	}
	var rest []graph.OpID
	for i := range g.Ops {
		if g.Ops[i].Phase == graph.Forward && (keys[i] == "" || blocks == 0 && count[sigs[p.region[i]]] < 2) {
			rest = append(rest, graph.OpID(i))
		}
	}
	if len(rest) > 0 {
		out = append(out, region{ops: rest})
	}
	// Renumber so region[op] indexes out.
	for r, reg := range out {
		for _, op := range reg.ops {
			p.region[op] = r
		}
	}
	return out, blocks, len(distinct)
}

// signature describes everything the program of block k depends on:
// per op in order its type, attributes, work and times, each input's
// type and shape and whether it comes from inside the block (and from
// which op and output) or outside, and per output whether it is read
// outside the block where its producer could leave it unreplicated. An
// input from an op of the block that has only the replicated strategy
// counts as one from outside: the programs price both alike.
// Blocks of equal signature have equal programs.
func (p *problem) signature(ops []graph.OpID, k int) string {
	g := p.g
	var vars []graph.OpID
	for _, op := range ops {
		if !p.inert(op, k) {
			vars = append(vars, op)
		}
	}
	ops = vars
	local := make(map[graph.OpID]int, len(ops))
	for i, op := range ops {
		local[op] = i
	}
	var b strings.Builder
	tensor := func(x graph.TensorID) {
		tt := &g.Tensors[x]
		fmt.Fprintf(&b, "%s:%s:%d:%t", tt.DType, tt.ShapeString(), tt.Kind, p.hasGrad(x))
	}
	for _, id := range ops {
		op := &g.Ops[id]
		fmt.Fprintf(&b, "|%s.%s f%d t%x", op.Domain, op.Type, op.Work.FLOPs, math.Float64bits(p.opTime(id, 1)))
		writeAttrs(&b, op.Attrs)
		for _, x := range op.Inputs {
			b.WriteString(" <")
			tensor(x)
			tt := &g.Tensors[x]
			switch {
			case tt.Producer != graph.NoOp && p.region[tt.Producer] == k && g.Ops[tt.Producer].Phase == graph.Forward && len(p.strats[tt.Producer]) > 1:
				// An op with one strategy leaves its outputs replicated,
				// as if made outside: GPT-2's blocks read a constant of
				// their first block's, which block 0 makes itself.
				fmt.Fprintf(&b, "@%d.%d", local[tt.Producer], slices.Index(g.Ops[tt.Producer].Outputs, x))
			case tt.Kind == graph.Parameter:
				u := p.update[x]
				ut := 0.0
				if u != graph.NoOp && tt.Consumers[0] == id {
					ut = p.m.RunTime(u, 1)
				}
				fmt.Fprintf(&b, "@param:%x", math.Float64bits(ut))
			default:
				b.WriteString("@ext")
			}
		}
		canSplit := len(p.strats[id]) > 1
		for _, x := range op.Outputs {
			b.WriteString(" >")
			tensor(x)
			if canSplit && p.readOutside(x, k) {
				b.WriteString("!")
			}
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return string(sum[:])
}

// readOutside reports whether forward tensor x is read by a forward op
// outside region k or is a graph output.
func (p *problem) readOutside(x graph.TensorID, k int) bool {
	if slices.Contains(p.g.Outputs, x) {
		return true
	}
	for _, c := range p.g.Tensors[x].Consumers {
		if p.g.Ops[c].Phase == graph.Forward && p.region[c] != k {
			return true
		}
	}
	return false
}

// writeAttrs writes attrs in key order (never map order).
func writeAttrs(b *strings.Builder, attrs graph.Attrs) {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		a := attrs[k]
		fmt.Fprintf(b, " %s=%d:%d:%x:%q:%v:%x:%q:%v", k, a.Kind, a.Int, math.Float64bits(a.Float), a.String, a.Ints, a.Floats, a.Strings, a.TensorInts)
		if a.Tensor != nil {
			fmt.Fprintf(b, ":%s:%s", a.Tensor.DType, a.Tensor.ShapeString())
		}
	}
}
