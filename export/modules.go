package export

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
)

// FQN is the PyTorch name of the module at an op-name module path, as
// torch.onnx exports them: the fully qualified name named_modules() and
// get_submodule() use ("blocks.6.attn" for "/blocks/blocks.6/attn/"; ""
// for the root, "/").
//
// torch.onnx names each module it enters by the tail of its fully
// qualified name: the last atom that is not a number, and the numbers
// after it ("blocks.6" for blocks.6, "conv.0.0" for features.1.conv.0.0,
// "attn" for blocks.6.attn), and writes the modules it entered, outermost
// first, between slashes. A container whose forward is not called (a
// ModuleList iterated in its parent's forward) is entered by no op, so it
// has no component of its own: its children's components carry its name
// ("/encoder/layers.0/" for encoder.layers.0). So each component extends
// the name built so far, except where it repeats the tail of that name
// and adds numbers: that is a child of a called container (an
// nn.Sequential), whose number alone is added ("/blocks/blocks.6/" is
// blocks.6, "/features/features.1/conv/conv.0/conv.0.0/" is
// features.1.conv.0.0). A component that is the n-th call (n > 1) of a
// module called more than once carries a suffix _<n-1> ("relu_1"), which
// FQN keeps; see repeatedCall.
func FQN(path string) string {
	var atoms []string
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		if c == "" {
			continue
		}
		ca := strings.Split(c, ".")
		tail := atoms[lastWord(atoms):]
		if len(tail) > 0 && len(ca) > len(tail) && slices.Equal(ca[:len(tail)], tail) && allNumbers(ca[len(tail):]) {
			atoms = append(atoms, ca[len(tail):]...)
		} else {
			atoms = append(atoms, ca...)
		}
	}
	return strings.Join(atoms, ".")
}

// lastWord is the index of the last atom that is not a number, 0 when
// every one is.
func lastWord(atoms []string) int {
	for i := len(atoms) - 1; i >= 0; i-- {
		if !isNumber(atoms[i]) {
			return i
		}
	}
	return 0
}

func allNumbers(atoms []string) bool {
	for _, a := range atoms {
		if !isNumber(a) {
			return false
		}
	}
	return true
}

func isNumber(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// modulePath is the module path of an op name: everything up to its last
// '/' ("/blocks/blocks.6/attn/" for "/blocks/blocks.6/attn/MatMul"), or ""
// for a name with none (Identity_3, /Add).
func modulePath(name string) string {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return ""
	}
	return name[:i+1]
}

// parent is the module path a module path is in: "/blocks/" for
// "/blocks/blocks.6/", "/" for "/tok/".
func parent(path string) string {
	i := strings.LastIndexByte(strings.TrimSuffix(path, "/"), '/')
	if i < 0 {
		return "/"
	}
	return path[:i+1]
}

// lastComponent is the last component of a module path: "blocks.6" for
// "/blocks/blocks.6/".
func lastComponent(path string) string {
	p := strings.TrimSuffix(path, "/")
	return p[strings.LastIndexByte(p, '/')+1:]
}

// callSuffix splits a component into the module's own component and the
// suffix torch.onnx gives its repeated calls: "relu_2" is relu's third
// call.
var callSuffix = regexp.MustCompile(`^(.+)_([0-9]+)$`)

// moduleIndex is every module path the plan's op names enter.
type moduleIndex map[string]bool

func newModuleIndex(p *plan.Plan) moduleIndex {
	idx := moduleIndex{}
	for _, op := range p.Ops {
		for path := modulePath(op.Name); path != "" && path != "/"; path = parent(path) {
			if idx[path] {
				break
			}
			idx[path] = true
		}
	}
	return idx
}

// repeatedCall says why a module path is not one module a runtime can
// name once: one of its components is a repeated call of a module
// ("/layer1/layer1.0/relu_1/" is the second call of layer1.0.relu, whose
// first is /layer1/layer1.0/relu/), or the module itself is called more
// than once. A component such as Inception's "branch5x5_1" is a module of
// its own, as no "branch5x5" sits beside it. Empty when neither.
func (idx moduleIndex) repeatedCall(path string) string {
	up := "/"
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		if m := callSuffix.FindStringSubmatch(c); m != nil && idx[up+m[1]+"/"] {
			return fmt.Sprintf("%s is a repeated call of module %s (op names %s...)", path, FQN(up+m[1]+"/"), up+c+"/")
		}
		up += c + "/"
	}
	calls := 1
	own := lastComponent(path)
	for other := range idx {
		if parent(other) != parent(path) {
			continue
		}
		if m := callSuffix.FindStringSubmatch(lastComponent(other)); m != nil && m[1] == own {
			calls++
		}
	}
	if calls > 1 {
		return fmt.Sprintf("module %s is called %d times in the forward pass (op names %s, %s_1/, ...)", FQN(path), calls, path, strings.TrimSuffix(path, "/"))
	}
	return ""
}

// layer is one module at the level the plan's stages are cut at.
type layer struct {
	// Path is its module path in op names, FQN its PyTorch name.
	Path, FQN string
	Stage     int
}

// cuts is a pipeline plan's stages as runs of consecutive modules.
type cuts struct {
	// Stages are the plan's stages in index order.
	Stages []plan.Stage
	// Layers are the modules at the cut level in stage order, then in the
	// order the plan lists their ops.
	Layers []layer
	// First is the index in Layers of each stage's first module; First[s]
	// .. First[s+1]-1 are stage s's modules, First[len(Stages)] is
	// len(Layers).
	First []int
}

// moduleCuts checks that p is a pipeline plan whose stages start and end
// at module boundaries, and returns its stages as runs of modules.
// target names the runtime in messages.
func moduleCuts(p *plan.Plan, o Options, target string) (*cuts, error) {
	src := o.source()
	if len(p.Stages) < 2 {
		return nil, errorf(OneStage, "%s: the plan has one stage, so it has no split points for %s: plan with a pipeline strategy and export that plan", src, target)
	}
	stages := slices.Clone(p.Stages)
	slices.SortFunc(stages, func(a, b plan.Stage) int { return a.Index - b.Index })
	for i, st := range stages {
		if st.Index != i {
			return nil, errorf(Invalid, "%s: stage indices are not 0..%d (found %d at position %d); is the plan file edited?", src, len(stages)-1, st.Index, i)
		}
	}
	replan := "replan with stages cut at module boundaries"
	for _, st := range stages {
		if st.ModulePrefix == "" {
			return nil, errorf(NoModules, "%s: stage %d (first op %s) has no module prefix: its op names carry no module path, so %s cannot name where it starts; plan a model whose op names carry module paths (PyTorch's torch.onnx export), or export to tf-device-map", src, st.Index, st.FirstOp, target)
		}
		if st.Index > 0 && st.FirstModule == "" {
			return nil, errorf(OpCuts, "%s: stage %d starts at op %s, which is in no module, so %s cannot name where it starts: %s", src, st.Index, st.FirstOp, target, replan)
		}
	}
	stageOf := map[string]int{}
	for _, st := range stages {
		for _, name := range st.Ops {
			stageOf[name] = st.Index
		}
	}
	for _, op := range p.Ops {
		if _, ok := stageOf[op.Name]; !ok && op.Stage != nil {
			stageOf[op.Name] = *op.Stage
		}
	}
	if err := dataFlow(p, stageOf, src); err != nil {
		return nil, err
	}
	// The cut level: the modules holding the modules stages start and
	// end with.
	containers := map[string]bool{}
	for _, st := range stages {
		for _, m := range []string{st.FirstModule, st.LastModule} {
			if m != "" {
				containers[parent(m)] = true
			}
		}
	}
	key := func(path string) string {
		for c := parent(path); ; c = parent(c) {
			// A path outside c (one with no leading '/', which no
			// torch.onnx op name has) is in no container.
			if containers[c] && len(path) > len(c) && strings.HasPrefix(path, c) {
				rest := path[len(c):]
				return c + rest[:strings.IndexByte(rest, '/')+1]
			}
			if c == "/" {
				return ""
			}
		}
	}
	type seen struct {
		stage int
		op    string
	}
	first := map[string]seen{}
	var layers []layer
	for _, op := range p.Ops {
		path := modulePath(op.Name)
		if op.Phase != "forward" || path == "" || containers[path] || graph.Bookkeeping(op.Type) {
			continue
		}
		s, ok := stageOf[op.Name]
		if !ok {
			continue
		}
		k := key(path)
		if k == "" {
			continue
		}
		if f, ok := first[k]; ok {
			if f.stage != s {
				a, b := f, seen{s, op.Name}
				if a.stage > b.stage {
					a, b = b, a
				}
				return nil, errorf(OpCuts, "%s: stage %d starts inside module %s (%s): its op %s is in stage %d and %s in stage %d, so the plan cuts between ops where %s needs module boundaries: %s",
					src, b.stage, FQN(k), k, a.op, a.stage, b.op, b.stage, target, replan)
			}
			continue
		}
		first[k] = seen{s, op.Name}
		layers = append(layers, layer{Path: k, FQN: FQN(k), Stage: s})
	}
	slices.SortStableFunc(layers, func(a, b layer) int { return a.Stage - b.Stage })
	idx := newModuleIndex(p)
	c := &cuts{Stages: stages, Layers: layers, First: make([]int, len(stages)+1)}
	for i := range c.First {
		c.First[i] = len(layers)
	}
	for i := len(layers) - 1; i >= 0; i-- {
		c.First[layers[i].Stage] = i
	}
	for s := len(stages) - 1; s >= 0; s-- {
		if c.First[s] > c.First[s+1] {
			c.First[s] = c.First[s+1]
		}
	}
	for _, st := range stages {
		if c.First[st.Index] == c.First[st.Index+1] {
			return nil, errorf(OpCuts, "%s: stage %d (%s .. %s) holds no whole module at the level the stages are cut at, so %s cannot give it layers: %s", src, st.Index, st.FirstOp, st.LastOp, target, replan)
		}
		if st.Index > 0 {
			if got := layers[c.First[st.Index]].Path; st.FirstModule != got {
				return nil, errorf(Invalid, "%s: stage %d starts with module %s in the plan, but its first module by op order is %s; is the plan file edited?", src, st.Index, st.FirstModule, got)
			}
		}
	}
	for _, l := range layers {
		if why := idx.repeatedCall(l.Path); why != "" {
			return nil, errorf(Invalid, "%s: %s, which %s cannot name once as a stage's module; plan a model that calls each module of the cut level once", src, why, target)
		}
	}
	return c, nil
}

// stageRange describes a stage's modules for a comment: "blocks.4 ..
// blocks.7", or the one module.
func (c *cuts) stageRange(s int) string {
	a, b := c.Layers[c.First[s]].FQN, c.Layers[c.First[s+1]-1].FQN
	if a == b {
		return a
	}
	return a + " .. " + b
}

// dataFlow checks the plan's stage numbers against its data flow: a
// tensor the forward pass sends from one stage goes to the same or a
// later stage. The plan records no edges, but its transfers name the
// tensors that cross devices, and a tensor is named after the op that
// makes it (an ONNX node's "<op>_output_0", a costed op's own name), so
// the op that makes each is the op whose name is the longest prefix of
// the tensor's. Bookkeeping ops (a weight's Identity, a Constant) are
// left out, as the partitioners place them anywhere, and so is the
// backward pass, whose gradients go to an update op beside the first op
// that reads the weight, in whichever stage. A plan whose stages were
// renumbered by hand (stage 0 holding the last blocks) would otherwise
// split the model at its input.
func dataFlow(p *plan.Plan, stageOf map[string]int, src string) error {
	ops := make(map[string]*plan.Op, len(p.Ops))
	devStage := map[string]int{}
	for i := range p.Ops {
		op := &p.Ops[i]
		ops[op.Name] = op
		if s, ok := stageOf[op.Name]; ok {
			devStage[op.Device] = s
		}
	}
	for d, s := range p.DeviceStages() {
		if _, ok := devStage[d]; !ok {
			devStage[d] = s
		}
	}
	for _, t := range p.Transfers {
		op := producer(ops, t.Tensor)
		if op == nil || op.Phase != "forward" || graph.Bookkeeping(op.Type) {
			continue
		}
		from, ok1 := stageOf[op.Name]
		to, ok2 := devStage[t.To]
		if ok1 && ok2 && from > to {
			return errorf(Invalid, "%s: the stage numbers contradict the data flow: op %s of stage %d sends %s to %s in stage %d, but a stage's forward pass sends only to later stages; is the plan file edited? export the plan as opplace plan wrote it",
				src, op.Name, from, t.Tensor, t.To, to)
		}
	}
	return nil
}

// producer is the op a transfer's tensor is named after: the op whose
// name is the longest prefix of the tensor's name that ends where a
// name's suffix begins (at the end, '_', ':', '/', '-' or '#'); nil when
// none is.
func producer(ops map[string]*plan.Op, tensor string) *plan.Op {
	for end := len(tensor); end > 0; end-- {
		if end < len(tensor) && !strings.ContainsRune("_:/-#", rune(tensor[end])) {
			continue
		}
		if op, ok := ops[tensor[:end]]; ok {
			return op
		}
	}
	return nil
}
