package graph

import (
	"fmt"
	"slices"
	"strings"
)

func init() {
	RegisterFusionPass(FusionPass{
		Name:    "horizontal",
		Summary: "fuse sibling anchors reading the same input with the same type and attributes (Q/K/V projections, Inception's parallel 1x1 convolutions) into one wider kernel",
		Run:     fuseHorizontal,
	})
	RegisterFusionMode("horizontal", "horizontal")
	RegisterFusionMode("hybrid", "vertical", "horizontal")
}

// fuseHorizontal merges the groups of anchor ops that read the same
// activation as their data input (input 0) and agree on type, attributes
// and the shape of their weights' non-output dimensions, so their weights
// concatenate into one kernel that reads the input once. Siblings that
// depend on each other through another group stay apart (CanMerge).
func fuseHorizontal(f *Fuser) int {
	g := f.Graph()
	merged := 0
	for ti := range g.Tensors {
		t := &g.Tensors[ti]
		if t.Kind.IsResident() || len(t.Consumers) < 2 {
			continue
		}
		var keys []string
		buckets := map[string][]OpID{}
		for _, u := range t.Consumers {
			op := &g.Ops[u]
			if !IsAnchorOp(op.Type) || len(op.Inputs) == 0 || op.Inputs[0] != TensorID(ti) {
				continue
			}
			k := siblingKey(g, op)
			if _, seen := buckets[k]; !seen {
				keys = append(keys, k)
			}
			if !slices.Contains(buckets[k], u) {
				buckets[k] = append(buckets[k], u)
			}
		}
		for _, k := range keys {
			// Each sibling joins the first earlier group it can merge with
			// (the first one, unless a path between them forbids it).
			var bases []OpID
			for _, u := range buckets[k] {
				joined := false
				for _, b := range bases {
					if f.Find(b) == f.Find(u) {
						joined = true
						break
					}
					if f.Merge(b, u) {
						merged++
						joined = true
						break
					}
				}
				if !joined {
					bases = append(bases, u)
				}
			}
		}
	}
	return merged
}

// siblingKey is what two ops reading one input must share to run as one
// wider kernel: type, domain, attributes, and every weight's shape apart
// from its output dimension (dim 0 of a Conv weight, the last dim of a
// MatMul/Gemm B).
func siblingKey(g *Graph, op *Op) string {
	var b strings.Builder
	b.WriteString(op.Domain)
	b.WriteByte('/')
	b.WriteString(op.Type)
	b.WriteByte('|')
	b.WriteString(AttrsKey(op.Attrs))
	for i, in := range op.Inputs[1:] {
		t := &g.Tensors[in]
		shape := t.Shape
		switch {
		case !t.ShapeKnown:
			fmt.Fprintf(&b, "|%d:?", i)
			continue
		case i == 0 && len(shape) > 0 && strings.HasPrefix(op.Type, "Conv"):
			shape = shape[1:]
		case i == 0 && len(shape) > 0:
			shape = shape[:len(shape)-1]
		default:
			shape = nil // biases and scales: any length
		}
		fmt.Fprintf(&b, "|%d:%s:%v", i, t.DType, shape)
	}
	return b.String()
}

// AttrsKey renders attributes canonically (sorted by name), so equal
// attribute sets give equal strings. Graph-valued attributes are named by
// count only.
func AttrsKey(a Attrs) string {
	names := make([]string, 0, len(a))
	for n := range a {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		v := a[n]
		fmt.Fprintf(&b, "%s=", n)
		switch v.Kind {
		case AttrInt:
			fmt.Fprint(&b, v.Int)
		case AttrFloat:
			fmt.Fprint(&b, v.Float)
		case AttrString:
			fmt.Fprintf(&b, "%q", v.String)
		case AttrInts:
			fmt.Fprint(&b, v.Ints)
		case AttrFloats:
			fmt.Fprint(&b, v.Floats)
		case AttrStrings:
			fmt.Fprintf(&b, "%q", v.Strings)
		case AttrTensor:
			if v.Tensor != nil {
				fmt.Fprintf(&b, "tensor(%s,%s,%v)", v.Tensor.DType, v.Tensor.ShapeString(), v.TensorInts)
			}
		default:
			fmt.Fprintf(&b, "graphs(%d)", len(v.Graphs))
		}
		b.WriteByte(';')
	}
	return b.String()
}
