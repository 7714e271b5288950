package graph

// bookkeeping are the op types that do no work on a tensor's values:
// constants, identities, shape queries and views. A pipeline stage's
// first and last ops skip them so they name a real computation.
var bookkeeping = map[string]bool{
	// ONNX
	"Identity": true, "Constant": true, "ConstantOfShape": true, "Shape": true, "Size": true,
	"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true,
	// TensorFlow
	"Const": true, "NoOp": true, "StopGradient": true, "Placeholder": true,
	"ExpandDims": true, "Snapshot": true,
}

// Bookkeeping reports whether ops of type opType do no work on a
// tensor's values (Identity, Constant, Shape, Reshape and the like).
func Bookkeeping(opType string) bool { return bookkeeping[opType] }

// shapeElements is the most elements an op's outputs may have for it to
// count as shape arithmetic (Shape -> Gather -> Concat chains on a
// tensor's dimensions).
const shapeElements = 8

// IsBookkeeping reports whether op does no work on a tensor's values: its
// type is Bookkeeping, or it has outputs and each is a known shape of at
// most a few elements (arithmetic on dimensions, as ONNX exports do with
// Shape, Gather and Concat).
func (g *Graph) IsBookkeeping(op OpID) bool {
	o := &g.Ops[op]
	if Bookkeeping(o.Type) {
		return true
	}
	if len(o.Outputs) == 0 {
		return false
	}
	for _, t := range o.Outputs {
		if tt := &g.Tensors[t]; !tt.ShapeKnown || tt.Elements() > shapeElements {
			return false
		}
	}
	return true
}
