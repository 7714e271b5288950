package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/files"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

// A given placement (strategy given) comes from a placement file: a map
// from selectors to cluster devices, or the plan file of an earlier run.
// It is resolved on the graph the plan lists (the training step's, before
// fusion), so its selectors meet the op names a user sees; fusion then
// never merges ops it puts on different devices, and the strategy gets
// the placement of the fused graph's ops.

// ModulePrefix starts a selector that names a module: every op whose name
// lies under that path ("module:/blocks/blocks.3" covers
// "/blocks/blocks.3/attn/MatMul" and its gradient).
const ModulePrefix = "module:"

// PlacementFile is a placement file as read: its entries, or a plan.
type PlacementFile struct {
	Path string
	// Entries are the selector map's entries in file order; nil for a plan.
	Entries []PlacementEntry
	// Plan is the plan document, when the file is one.
	Plan *plan.Plan
}

// PlacementEntry maps a selector (an op name, ModulePrefix and a module
// path, or a path.Match pattern) to a cluster device's name.
type PlacementEntry struct {
	Selector, Device string
}

// ReadPlacement reads a placement file: a JSON or YAML map from
// selectors to device names, or a plan document (JSON or YAML, as plan
// -o writes it), told apart by content: a document with arrays under
// "ops" and "devices" is a plan. Errors name the file and the entry.
func ReadPlacement(path string) (*PlacementFile, error) {
	data, err := files.Read(path, "placement")
	if err != nil {
		return nil, &InputError{err}
	}
	pf, err := decodePlacement(bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\ufeff"))))
	if err != nil {
		return nil, &InputError{fmt.Errorf("%s: %w", path, err)}
	}
	pf.Path = path
	return pf, nil
}

// decodePlacement reads a placement file's contents.
func decodePlacement(data []byte) (*PlacementFile, error) {
	const want = "a placement (a map from op names, module: paths or patterns to devices) or a plan file"
	if len(data) == 0 {
		return nil, fmt.Errorf("the file is empty; expected %s", want)
	}
	if data[0] == '{' {
		if keys := plan.JSONKeys(data); keys["ops"] == '[' && keys["devices"] == '[' {
			return decodePlan(data) // parsed once: a plan may be 100s of MB
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			return nil, fmt.Errorf("not valid JSON: %v; expected %s", err, want)
		}
		return jsonEntries(data)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %v; expected %s", err, want)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a map; expected %s", want)
	}
	root := doc.Content[0]
	seq := func(key string) bool {
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == key {
				return root.Content[i+1].Kind == yaml.SequenceNode
			}
		}
		return false
	}
	if seq("ops") && seq("devices") {
		return decodePlan(data)
	}
	pf := &PlacementFile{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a selector must be a string (an op name, module: path or pattern)", k.Line)
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return nil, fmt.Errorf("entry %q (line %d): expected a device name, got %s", k.Value, v.Line, yamlKind(v))
		}
		if err := pf.add(k.Value, v.Value); err != nil {
			return nil, err
		}
	}
	return pf, nil
}

func yamlKind(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a map"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "nothing"
	}
	return n.Tag
}

// decodePlan reads a plan file given as a placement.
func decodePlan(data []byte) (*PlacementFile, error) {
	p, err := plan.Decode(data)
	if err != nil {
		return nil, err
	}
	return &PlacementFile{Plan: p}, nil
}

// jsonEntries reads a JSON object of selectors and device names in file
// order.
func jsonEntries(data []byte) (*PlacementFile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // '{', as Unmarshal found
		return nil, err
	}
	pf := &PlacementFile{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		dev, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("entry %q: expected a device name, got %s", key, jsonKind(v))
		}
		if err := pf.add(key, dev); err != nil {
			return nil, err
		}
	}
	return pf, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// add appends an entry, refusing an empty one and a repeated selector.
func (pf *PlacementFile) add(sel, dev string) error {
	switch {
	case sel == "":
		return errors.New("an entry has an empty selector")
	case strings.TrimSpace(dev) == "":
		return fmt.Errorf("entry %q: no device named", sel)
	}
	for _, e := range pf.Entries {
		if e.Selector == sel {
			return fmt.Errorf("entry %q is given twice", sel)
		}
	}
	pf.Entries = append(pf.Entries, PlacementEntry{sel, dev})
	return nil
}

// givenState is a given placement resolved on the graph the plan lists.
type givenState struct {
	source string
	// device is each op's device, -1 where the placement leaves it out.
	device []int
	// ran is when each op ran in a plan file, to run each device's ops
	// in that order again; nil to run them in topological order.
	ran *runOrder
	// stageOf is each device's stage, and stages, microBatches and
	// schedule the shape of a plan file of several stages or replicas.
	stageOf      []int
	stages       []sim.Stage
	microBatches int
	schedule     sim.Schedule
	notes        []string
	// missing counts the ops left to the Fill placer.
	missing int
	// shards are a plan file's ops' tensor-parallel splits, by op name.
	shards map[string]string
}

// How an op got its given device, for notes and messages.
const (
	byNone = iota
	byName
	byModule
	byPattern
	byPlan
	byColocation
	byPin
)

// resolvePlacement reads the placement file, if any, and resolves it with
// the model's pins on the graph the plan lists, for strategy given.
func resolvePlacement(_ context.Context, r *run) error {
	if !r.wantGiven {
		return nil
	}
	if f := r.opts.Fill; f != "" && !slices.Contains(placer.Names(), f) {
		return &InputError{fmt.Errorf("unknown placer %q to fill in the placement: use one of %v", f, placer.Names())}
	}
	pf := r.opts.PlacementFile
	if pf == nil && r.opts.Placement != "" {
		var err error
		if pf, err = ReadPlacement(r.opts.Placement); err != nil {
			return err
		}
	}
	gs, err := resolveGiven(r, pf)
	if err != nil {
		return err
	}
	r.given = gs
	return nil
}

// resolver is the state of one resolution.
type resolver struct {
	r      *run
	g      *graph.Graph
	c      *cluster.Cluster
	source string
	dev    []int
	how    []uint8
	// entry is the placement entry (or plan op) that placed each op, -1
	// for none.
	entry []int32
	pf    *PlacementFile
}

// resolveGiven works out each op's device: the placement file's entries,
// then colocation groups following them, then the model's pins.
func resolveGiven(r *run, pf *PlacementFile) (*givenState, error) {
	g := r.model.Graph
	n := len(g.Ops)
	rs := &resolver{r: r, g: g, c: r.cluster, pf: pf, dev: make([]int, n), how: make([]uint8, n), entry: make([]int32, n)}
	for i := range rs.dev {
		rs.dev[i], rs.entry[i] = -1, -1
	}
	gs := &givenState{}
	var extra []string
	switch {
	case pf == nil:
		rs.source = r.opts.ModelPath + "'s devices"
	case pf.Plan != nil:
		rs.source = pf.Path
		var err error
		if extra, err = rs.planOps(gs); err != nil {
			return nil, err
		}
	default:
		rs.source = pf.Path
		if err := rs.selectors(); err != nil {
			return nil, err
		}
	}
	rs.follow()
	if err := rs.pins(); err != nil {
		return nil, err
	}
	if err := rs.canRun(); err != nil {
		return nil, err
	}
	var missing []graph.OpID
	for op, d := range rs.dev {
		if d < 0 {
			missing = append(missing, graph.OpID(op))
		}
	}
	if len(missing) > 0 && r.opts.Fill == "" {
		msg := fmt.Sprintf("%s leaves %s of %d unplaced (%s): give them devices, or name a placer to place them",
			rs.source, plan.Count(len(missing), "op", "ops"), n, g.QuoteNames(missing))
		if len(extra) > 0 {
			msg += fmt.Sprintf("; %s of the plan %s not in the graph (%s): is it a plan of another model, mode or batch?",
				plan.Count(len(extra), "op", "ops"), isAre(len(extra)), quoteList(extra[:min(len(extra), 3)], len(extra)))
		}
		return nil, &InputError{&UnplacedError{errors.New(msg)}}
	}
	if len(extra) > 0 {
		r.model.Warnings = append(r.model.Warnings, fmt.Sprintf("%s: %s of the plan %s not in the graph, so %s ignored (%s)",
			rs.source, plan.Count(len(extra), "op", "ops"), isAre(len(extra)), itThey(len(extra)), quoteList(extra[:min(len(extra), 3)], len(extra))))
	}
	gs.source, gs.device, gs.missing = rs.source, rs.dev, len(missing)
	gs.notes = rs.notes()
	return gs, nil
}

// UnplacedError is a placement that leaves ops out while no placer was
// named to place them.
type UnplacedError struct{ Err error }

func (e *UnplacedError) Error() string { return e.Err.Error() }
func (e *UnplacedError) Unwrap() error { return e.Err }

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func itThey(n int) string {
	if n == 1 {
		return "it is"
	}
	return "they are"
}

// device resolves a device name of entry what.
func (rs *resolver) device(what, name string) (int, error) {
	d, ok := rs.c.DeviceIndex(name)
	if !ok {
		return -1, &InputError{fmt.Errorf("%s: %s: device %q is not a device of cluster %q (%s)", rs.source, what, name, rs.c.Name, deviceList(rs.c))}
	}
	return d, nil
}

// what names entry i of the placement file in messages.
func (rs *resolver) what(i int32) string {
	if rs.pf.Plan != nil {
		return fmt.Sprintf("ops[%d] %q", i, rs.pf.Plan.Ops[i].Name)
	}
	return fmt.Sprintf("entry %q", rs.pf.Entries[i].Selector)
}

// planOps places the ops a plan file lists where it ran them, and takes
// its order and shape. It returns the names of the plan's ops the graph
// does not have.
func (rs *resolver) planOps(gs *givenState) ([]string, error) {
	p := rs.pf.Plan
	var extra []string
	covered := 0
	for i := range p.Ops {
		po := &p.Ops[i]
		op, ok := rs.g.OpByName(po.Name)
		if !ok {
			extra = append(extra, po.Name)
			continue
		}
		d, err := rs.device(rs.what(int32(i)), po.Device)
		if err != nil {
			return nil, err
		}
		if rs.entry[op] >= 0 {
			return nil, &InputError{fmt.Errorf("%s: %s: the op is listed twice (ops[%d])", rs.source, rs.what(int32(i)), rs.entry[op])}
		}
		rs.dev[op], rs.how[op], rs.entry[op] = d, byPlan, int32(i)
		if po.Shard != "" {
			if gs.shards == nil {
				gs.shards = map[string]string{}
			}
			gs.shards[po.Name] = po.Shard
		}
		covered++
	}
	if err := rs.shape(gs); err != nil {
		return nil, err
	}
	if covered == len(rs.g.Ops) && p.MicroBatches <= 1 {
		gs.ran = planRuns(p, rs.g, rs.entry)
	}
	return extra, nil
}

// runOrder is when each op ran in a plan file: its start and end, its
// place in the plan's listing (topological) and the index of its first
// transfer in the plan (-1 for none).
type runOrder struct {
	start, end []float64
	listed     []int32
	sent       []int
}

// planRuns reads when the graph's ops ran in plan p, whose op entry[op]
// each is.
func planRuns(p *plan.Plan, g *graph.Graph, entry []int32) *runOrder {
	n := len(entry)
	ro := &runOrder{start: make([]float64, n), end: make([]float64, n), listed: entry, sent: make([]int, n)}
	for op, e := range entry {
		ro.start[op], ro.end[op], ro.sent[op] = p.Ops[e].StartMS, p.Ops[e].EndMS, -1
	}
	for i, t := range p.Transfers {
		if id, ok := g.TensorByName(t.Tensor); ok {
			if op := g.Tensors[id].Producer; op != graph.NoOp && ro.sent[op] < 0 {
				ro.sent[op] = i
			}
		}
	}
	return ro
}

// coarsen is the run order of a fused graph's ops: a group ran when its
// members did, listed at its first member and sent with its first
// transfer.
func (ro *runOrder) coarsen(members [][]graph.OpID) *runOrder {
	n := len(members)
	c := &runOrder{start: make([]float64, n), end: make([]float64, n), listed: make([]int32, n), sent: make([]int, n)}
	for k, ms := range members {
		first := ms[0]
		c.start[k], c.end[k], c.listed[k], c.sent[k] = ro.start[first], ro.end[first], ro.listed[first], -1
		for _, m := range ms {
			c.listed[k] = min(c.listed[k], ro.listed[m])
			if s := ro.sent[m]; s >= 0 && (c.sent[k] < 0 || s < c.sent[k]) {
				c.sent[k] = s
			}
		}
	}
	return c
}

// priority ranks the ops as the plan ran them on devices dev: by start,
// then end (a zero-time op before the op that starts when it ends), then
// by the plan's listing. Ops of one device that started and ended at one
// instant ran in an order the plan does not record, but the simulator
// sends an op's outputs as it finishes, so the plan's transfers tell the
// order of those that sent any: they take the places such ops hold in
// the listing, in the order of their first transfers. The simulator,
// given each device's ops in the order they ran, runs them so again.
func (ro *runOrder) priority(dev []int) []int32 {
	ops := make([]int, len(dev))
	for i := range ops {
		ops[i] = i
	}
	slices.SortFunc(ops, func(a, b int) int {
		return cmp.Or(cmp.Compare(ro.start[a], ro.start[b]), cmp.Compare(ro.end[a], ro.end[b]), cmp.Compare(ro.listed[a], ro.listed[b]))
	})
	for i := 0; i < len(ops); {
		j := i + 1
		for j < len(ops) && ro.start[ops[j]] == ro.start[ops[i]] && ro.end[ops[j]] == ro.end[ops[i]] {
			j++
		}
		if tied := ops[i:j]; len(tied) > 1 {
			var devs []int
			for _, op := range tied {
				if !slices.Contains(devs, dev[op]) {
					devs = append(devs, dev[op])
				}
			}
			for _, d := range devs {
				var slots, senders []int
				for k, op := range tied {
					if dev[op] == d && ro.sent[op] >= 0 {
						slots, senders = append(slots, k), append(senders, op)
					}
				}
				slices.SortFunc(senders, func(a, b int) int { return cmp.Compare(ro.sent[a], ro.sent[b]) })
				for k, slot := range slots {
					tied[slot] = senders[k]
				}
			}
		}
		i = j
	}
	prio := make([]int32, len(dev))
	for rank, op := range ops {
		prio[op] = int32(rank)
	}
	return prio
}

// shape takes a plan file's stages, replicas, micro-batches and schedule,
// when it has more than one stage or replica, or a tensor-parallel stage.
func (rs *resolver) shape(gs *givenState) error {
	p := rs.pf.Plan
	gs.microBatches, gs.schedule = p.MicroBatches, sim.Schedule(p.Schedule)
	switch gs.schedule {
	case "", sim.OneFOneB, sim.GPipe:
	default:
		return &InputError{fmt.Errorf("%s: schedule %q is not one the simulator runs (1f1b or gpipe)", rs.source, p.Schedule)}
	}
	if p.MicroBatches < 0 {
		return &InputError{fmt.Errorf("%s: micro_batches %d is negative", rs.source, p.MicroBatches)}
	}
	several := len(p.Stages) > 1
	for _, st := range p.Stages {
		several = several || st.Replicas > 1 || st.TensorParallel > 1
	}
	if !several {
		return nil
	}
	gs.stageOf = make([]int, len(rs.c.Devices))
	for i := range gs.stageOf {
		gs.stageOf[i] = -1
	}
	for s, st := range p.Stages {
		groups := st.ReplicaDevices
		if len(groups) == 0 {
			r := max(st.Replicas, 1)
			if len(st.Devices)%r != 0 {
				return &InputError{fmt.Errorf("%s: stages[%d]: %d devices do not split into %d replicas", rs.source, s, len(st.Devices), r)}
			}
			k := len(st.Devices) / r
			for i := 0; i < r; i++ {
				groups = append(groups, st.Devices[i*k:(i+1)*k])
			}
		}
		// A tensor-parallel stage's split is solved again (strategy
		// given checks it against the ops' shards).
		stage := sim.Stage{Recompute: st.Recompute, Tensor: st.TensorParallel}
		if st.Sharding != "" {
			z, err := sim.ParseSharding(st.Sharding)
			if err != nil {
				return &InputError{fmt.Errorf("%s: stages[%d]: %w", rs.source, s, err)}
			}
			stage.Sharding = z
		}
		for k, names := range groups {
			var rep []int
			for _, name := range names {
				d, err := rs.device(fmt.Sprintf("stages[%d]", s), name)
				if err != nil {
					return err
				}
				if gs.stageOf[d] >= 0 {
					return &InputError{fmt.Errorf("%s: stages[%d]: device %s is in two stages or replicas", rs.source, s, name)}
				}
				gs.stageOf[d] = s
				if k > 0 {
					gs.stageOf[d] = -2 // another replica's: no op names it
				}
				rep = append(rep, d)
			}
			switch {
			case len(rep) == 0:
				return &InputError{fmt.Errorf("%s: stages[%d]: replica %d has no devices", rs.source, s, k)}
			case k > 0 && len(rep) != len(stage.Replicas[0]):
				return &InputError{fmt.Errorf("%s: stages[%d]: replica %d has %d devices, replica 0 has %d", rs.source, s, k, len(rep), len(stage.Replicas[0]))}
			}
			stage.Replicas = append(stage.Replicas, rep)
		}
		gs.stages = append(gs.stages, stage)
	}
	for op, d := range rs.dev {
		if d >= 0 && gs.stageOf[d] < 0 {
			return &InputError{fmt.Errorf("%s: %s: device %s is in no stage's first replica", rs.source, rs.what(rs.entry[op]), rs.c.Devices[d].Name)}
		}
	}
	return nil
}

// selector is a placement entry of a selector map, parsed.
type selector struct {
	how     uint8 // byName, byModule or byPattern
	pattern string
	// literal counts a pattern's characters that are not wildcards: more
	// is more specific.
	literal int
	dev     int
	matched bool
}

// selectors places the ops a selector map names. Each op takes the most
// specific entry that matches it: its exact name, else the longest
// module path it lies under, else the pattern with the most literal
// characters; two patterns equally specific that put it on different
// devices are an error, and so is an entry that matches no op.
func (rs *resolver) selectors() error {
	entries := rs.pf.Entries
	sels := make([]selector, len(entries))
	exact := map[graph.OpID]int{}
	modules := map[string]int{}
	var patterns []int
	for i, e := range entries {
		d, err := rs.device(rs.what(int32(i)), e.Device)
		if err != nil {
			return err
		}
		s := &sels[i]
		s.dev = d
		if op, ok := rs.g.OpByName(e.Selector); ok {
			s.how, exact[op] = byName, i
			continue
		}
		if mod, ok := strings.CutPrefix(e.Selector, ModulePrefix); ok {
			if strings.Trim(mod, "/") == "" && mod != "/" {
				return rs.entryError(i, "names no module: write the module path after %q, as in %s/blocks/blocks.3", ModulePrefix, ModulePrefix)
			}
			prefix := strings.TrimRight(mod, "/") + "/"
			if j, dup := modules[prefix]; dup {
				return rs.entryError(i, "names the module of entry %q", entries[j].Selector)
			}
			s.how, s.pattern, modules[prefix] = byModule, prefix, i
			continue
		}
		if !strings.ContainsAny(e.Selector, `*?[\`) {
			return rs.entryError(i, "no op of the graph is named so (a module is written %s<path>, a pattern uses *, ? or [...])", ModulePrefix)
		}
		if _, err := path.Match(e.Selector, ""); err != nil {
			return rs.entryError(i, "a malformed pattern (path.Match syntax: * and ? stop at /, [...] is a class)")
		}
		s.how, s.pattern, s.literal = byPattern, e.Selector, literals(e.Selector)
		patterns = append(patterns, i)
	}
	for i := range rs.g.Ops {
		op := graph.OpID(i)
		best := -1
		if e, ok := exact[op]; ok {
			best = e
		} else if best = longestModule(rs.g.Ops[i].Name, modules); best < 0 && len(patterns) > 0 {
			var err error
			if best, err = rs.bestPattern(op, sels, patterns); err != nil {
				return err
			}
		}
		if best >= 0 {
			sels[best].matched = true
			rs.dev[op], rs.how[op], rs.entry[op] = sels[best].dev, sels[best].how, int32(best)
		}
	}
	// A module or pattern outranked everywhere it matches still matched.
	for _, i := range patterns {
		for op := range rs.g.Ops {
			if sels[i].matched {
				break
			}
			sels[i].matched, _ = path.Match(sels[i].pattern, rs.g.Ops[op].Name)
		}
	}
	for prefix, i := range modules {
		for op := range rs.g.Ops {
			if sels[i].matched {
				break
			}
			sels[i].matched = strings.HasPrefix(rs.g.Ops[op].Name, prefix)
		}
	}
	for i := range sels {
		if !sels[i].matched {
			return rs.entryError(i, "matches no op of the graph")
		}
	}
	return nil
}

func (rs *resolver) entryError(i int, format string, args ...any) error {
	return &InputError{fmt.Errorf("%s: %s: %s", rs.source, rs.what(int32(i)), fmt.Sprintf(format, args...))}
}

// longestModule is the entry of the longest module path name lies under,
// or -1.
func longestModule(name string, modules map[string]int) int {
	if len(modules) == 0 {
		return -1
	}
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			if e, ok := modules[name[:i+1]]; ok {
				return e
			}
		}
	}
	return -1
}

// bestPattern is the entry of the most specific pattern matching op, or
// -1; two equally specific ones with different devices are an error.
func (rs *resolver) bestPattern(op graph.OpID, sels []selector, patterns []int) (int, error) {
	name := rs.g.Ops[op].Name
	best, rival := -1, -1
	for _, i := range patterns {
		if ok, _ := path.Match(sels[i].pattern, name); !ok {
			continue
		}
		switch {
		case best < 0 || sels[i].literal > sels[best].literal:
			best, rival = i, -1
		case sels[i].literal == sels[best].literal && sels[i].dev != sels[best].dev && rival < 0:
			rival = i
		}
	}
	if rival >= 0 {
		return -1, &InputError{fmt.Errorf("%s: entries %q and %q both match op %q, equally specific, and put it on %s and %s: give the op its own entry, or make one pattern more specific",
			rs.source, rs.pf.Entries[best].Selector, rs.pf.Entries[rival].Selector, name, rs.c.Devices[sels[best].dev].Name, rs.c.Devices[sels[rival].dev].Name)}
	}
	return best, nil
}

// literals counts the characters of a pattern that match only themselves
// (a class counts as one).
func literals(p string) int {
	n := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*', '?':
		case '\\':
			i++
			n++
		case '[':
			for i < len(p) && p[i] != ']' {
				i++
			}
			n++
		default:
			n++
		}
	}
	return n
}

// follow gives an op the placement leaves out the device its colocation
// group's placed ops share: a training step's gradients and updates
// follow their forward ops so. A group the placement splits over devices
// gives its other ops none.
func (rs *resolver) follow() {
	groups := graph.ColocationGroups(rs.g)
	shared := map[graph.OpID]int{} // group root -> device, -2 when split
	for op, d := range rs.dev {
		if d < 0 || rs.g.Ops[op].Colocate == "" {
			continue
		}
		root := groups.Find(graph.OpID(op))
		if s, ok := shared[root]; !ok {
			shared[root] = d
		} else if s != d {
			shared[root] = -2
		}
	}
	for op := range rs.dev {
		if rs.dev[op] >= 0 || rs.g.Ops[op].Colocate == "" {
			continue
		}
		if d, ok := shared[groups.Find(graph.OpID(op))]; ok && d >= 0 {
			rs.dev[op], rs.how[op] = d, byColocation
		}
	}
}

// pins gives the ops still left out the devices the model pins them to.
func (rs *resolver) pins() error {
	for op := range rs.dev {
		name := rs.g.Ops[op].Device
		if rs.dev[op] >= 0 || name == "" {
			continue
		}
		d, err := rs.device(fmt.Sprintf("op %q", rs.g.Ops[op].Name), name)
		if err != nil {
			return err
		}
		rs.dev[op], rs.how[op] = d, byPin
	}
	return nil
}

// canRun refuses an op placed on a device whose type has no time for it.
func (rs *resolver) canRun() error {
	model := rs.r.costModel()
	for op, d := range rs.dev {
		if d < 0 {
			continue
		}
		dev := &rs.c.Devices[d]
		if !math.IsInf(model.OpTime(rs.g, graph.OpID(op), dev.Type), 1) {
			continue
		}
		why := fmt.Sprintf("op %q", rs.g.Ops[op].Name)
		switch rs.how[op] {
		case byColocation:
			why += " (following its colocation group)"
		case byPin:
			why += " (pinned by the model)"
		default:
			why = rs.what(rs.entry[op]) + ": " + why
		}
		return &InputError{fmt.Errorf("%s: %s is put on %s, whose device type %s cannot run it (the model has no time for it there)", rs.source, why, dev.Name, dev.Type.Name)}
	}
	return nil
}

// notes say how the ops got their devices.
func (rs *resolver) notes() []string {
	var count [byPin + 1]int
	for _, h := range rs.how {
		count[h]++
	}
	var parts []string
	for _, c := range []struct {
		how  uint8
		what string
	}{{byPlan, "as the plan ran them"}, {byName, "by name"}, {byModule, "by module"}, {byPattern, "by pattern"},
		{byColocation, "following their colocation group"}, {byPin, "pinned by the model"}} {
		if count[c.how] > 0 {
			if len(parts) == 0 {
				parts = append(parts, fmt.Sprintf("%s %s", plan.Count(count[c.how], "op", "ops"), c.what))
			} else {
				parts = append(parts, fmt.Sprintf("%d %s", count[c.how], c.what))
			}
		}
	}
	return []string{fmt.Sprintf("placement from %s: %s", rs.source, strings.Join(parts, ", "))}
}

// quoteList quotes names, the first of total, and counts the rest.
func quoteList(names []string, total int) string {
	out := make([]string, 0, len(names)+1)
	for _, n := range names {
		out = append(out, fmt.Sprintf("%q", n))
	}
	if total > len(names) {
		out = append(out, fmt.Sprintf("and %d more", total-len(names)))
	}
	return strings.Join(out, ", ")
}

// onGraph is the placement of the problem's graph for strategy given: the
// fused graph's when fusion ran, whose ops take their members' device
// (fusion merged none the placement puts apart) and their earliest rank.
func (gs *givenState) onGraph(r *run) *strategy.Given {
	dev, ran := gs.device, gs.ran
	notes, joined := slices.Clone(gs.notes), 0
	if fs := r.fused; fs != nil {
		c := fs.coarse
		dev = make([]int, len(c.Members))
		for k, members := range c.Members {
			dev[k] = -1
			for _, m := range members {
				if gs.device[m] >= 0 {
					dev[k] = gs.device[m]
				}
			}
			if dev[k] >= 0 {
				for _, m := range members {
					if gs.device[m] < 0 {
						joined++
					}
				}
			}
		}
		if ran != nil {
			ran = ran.coarsen(c.Members)
		}
	}
	if gs.missing > 0 && len(notes) > 0 {
		last := &notes[len(notes)-1]
		if joined > 0 {
			*last += fmt.Sprintf(", %d left out: %d fused with given ops go with them, %d placed by %s", gs.missing, joined, gs.missing-joined, r.opts.Fill)
		} else {
			*last += fmt.Sprintf(", %d placed by %s", gs.missing, r.opts.Fill)
		}
	}
	var prio []int32
	if ran != nil {
		prio = ran.priority(dev)
	}
	g := &strategy.Given{Source: gs.source, Fill: r.opts.Fill, Notes: notes, Shards: gs.shards,
		Plan: sim.Plan{Placement: sim.Placement{Device: dev, Priority: prio}, Stages: gs.stages, MicroBatches: gs.microBatches, Schedule: gs.schedule}}
	if gs.stageOf != nil {
		g.Plan.OpStage = make([]int, len(dev))
		for op, d := range dev {
			if d >= 0 {
				g.Plan.OpStage[op] = gs.stageOf[d]
			}
		}
	}
	return g
}

// devicesOf is, for fusion, the devices each op may run on: the one the
// given placement puts it on, else every device whose type runs it.
func (gs *givenState) devicesOf(g *graph.Graph, c *cluster.Cluster, model cost.Model) *graph.DeviceSets {
	return runnableDevices(g, c, model, gs.device)
}

// runnableDevices is the devices of c each op may run on: fixed[op] when
// fixed is set and that is not -1, else every device whose type runs it
// under model.
func runnableDevices(g *graph.Graph, c *cluster.Cluster, model cost.Model, fixed []int) *graph.DeviceSets {
	nd := len(c.Devices)
	sets := graph.NewDeviceSets(len(g.Ops), nd)
	var types []*cluster.DeviceType
	typeOf := make([]int, nd)
	for d := range c.Devices {
		k := slices.Index(types, c.Devices[d].Type)
		if k < 0 {
			types, k = append(types, c.Devices[d].Type), len(types)
		}
		typeOf[d] = k
	}
	runs := make([]bool, len(types))
	for op := range g.Ops {
		if fixed != nil && fixed[op] >= 0 {
			sets.Add(graph.OpID(op), fixed[op])
			continue
		}
		for k, dt := range types {
			runs[k] = !math.IsInf(model.OpTime(g, graph.OpID(op), dt), 1)
		}
		for d := range c.Devices {
			if runs[typeOf[d]] {
				sets.Add(graph.OpID(op), d)
			}
		}
	}
	return sets
}
