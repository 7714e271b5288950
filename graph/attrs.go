package graph

// AttrKind tells which field of an Attr holds its value.
type AttrKind uint8

// The attribute kinds.
const (
	AttrInt AttrKind = iota + 1
	AttrFloat
	AttrString
	AttrInts
	AttrFloats
	AttrStrings
	AttrTensor
	AttrGraph
	AttrGraphs
)

// Attr is one operator attribute.
type Attr struct {
	Kind    AttrKind
	Int     int64
	Float   float64
	String  string
	Ints    []int64
	Floats  []float64
	Strings []string
	// Tensor holds a constant tensor's description; TensorInts its integer
	// values when the importer could read them (shape-feeding constants).
	Tensor     *Tensor
	TensorInts []int64
	// Graphs holds control-flow bodies (If branches, Loop and Scan bodies).
	Graphs []*Graph
}

// Attrs maps attribute names to values.
type Attrs map[string]Attr

// Int returns the named integer attribute, or def when it is absent.
func (a Attrs) Int(name string, def int64) int64 {
	if v, ok := a[name]; ok && v.Kind == AttrInt {
		return v.Int
	}
	return def
}

// Float returns the named float attribute, or def when it is absent.
func (a Attrs) Float(name string, def float64) float64 {
	if v, ok := a[name]; ok && v.Kind == AttrFloat {
		return v.Float
	}
	return def
}

// String returns the named string attribute, or def when it is absent.
func (a Attrs) String(name, def string) string {
	if v, ok := a[name]; ok && v.Kind == AttrString {
		return v.String
	}
	return def
}

// Ints returns the named integer-list attribute, or nil when it is absent.
func (a Attrs) Ints(name string) []int64 {
	if v, ok := a[name]; ok && v.Kind == AttrInts {
		return v.Ints
	}
	return nil
}

// Has reports whether the named attribute is present.
func (a Attrs) Has(name string) bool {
	_, ok := a[name]
	return ok
}
