package view

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
)

// block is a run of consecutive ops on one device that share a module
// path (at the chosen depth) and a phase.
type block struct {
	dev   int
	path  []string // module path components
	phase string
	ops   []int // plan op indices, in the device's order
	// pathless marks a block that so far holds only ops without a path.
	pathless bool
}

// modulePath is the module an op belongs to, from its name: the
// directories of a PyTorch export's "/layer3/layer3.2/conv1/Conv" or a
// TensorFlow scope's "tower_0/conv1/Conv2D". A gradient op
// ("<forward>/grad") belongs to its forward op's module.
func modulePath(name string) []string {
	name = strings.TrimSuffix(name, "/grad")
	parts := strings.Split(strings.Trim(name, "/"), "/")
	return parts[:len(parts)-1]
}

// moduleBlocks groups each device's kept ops, in the order the device
// ran them, into blocks of one top-level module and phase, then cuts
// them into submodules, one level at a time, while the view stays within
// its budget of blocks; past the budget at the top level, it merges
// neighbouring blocks instead.
func moduleBlocks(l *layout, o Options) []*block {
	groupOf := map[string]string{}
	for _, grp := range o.Groups {
		for _, m := range grp[1:] {
			groupOf[m] = grp[0]
		}
	}
	paths := make([][]string, len(l.p.Ops))
	perDev := make([][]int, len(l.p.Devices))
	named := false // some op names carry a module path
	for i := range l.p.Ops {
		paths[i] = modulePath(l.p.Ops[i].Name)
		named = named || len(paths[i]) > 0
	}
	for i := range l.p.Ops {
		if !l.keep(i, o) {
			paths[i] = nil
			continue
		}
		op := &l.p.Ops[i]
		if !named {
			// Without module paths, fused groups are the blocks.
			if grp, ok := groupOf[op.Name]; ok {
				paths[i] = []string{"fused " + grp}
			}
		}
		if op.Phase == "update" {
			paths[i] = nil // one block for a device's optimizer step
		}
		perDev[l.opDev[i]] = append(perDev[l.opDev[i]], i)
	}
	for _, ops := range perDev {
		slices.SortStableFunc(ops, func(a, b int) int {
			if sa, sb := l.p.Ops[a].StartMS, l.p.Ops[b].StartMS; sa != sb {
				if sa < sb {
					return -1
				}
				return 1
			}
			return a - b
		})
	}
	// group cuts a device's ops into blocks at a depth. An op without a
	// module path (a weight's Identity, a Constant) joins the block it
	// runs in rather than cutting it.
	group := func(dev int, ops []int, depth int) []*block {
		var out []*block
		var last *block
		for _, i := range ops {
			p := paths[i][:min(depth, len(paths[i]))]
			phase := l.p.Ops[i].Phase
			switch {
			case last != nil && last.phase == phase && len(paths[i]) == 0:
			case last != nil && last.phase == phase && slices.Equal(last.path, p):
			case last != nil && last.phase == phase && last.pathless:
				last.path, last.pathless = p, false
			default:
				last = &block{dev: dev, path: p, phase: phase, pathless: len(p) == 0}
				out = append(out, last)
			}
			last.ops = append(last.ops, i)
		}
		return out
	}
	var blocks []*block
	for d, ops := range perDev {
		blocks = append(blocks, group(d, ops, 1)...)
	}
	if len(blocks) > o.MaxBlocks {
		return mergeBlocks(blocks, o.MaxBlocks)
	}
	// Cut every block one level deeper while the view stays within its
	// budget: one depth everywhere reads more evenly than a view deep in
	// places.
	maxDepth := 0
	for _, p := range paths {
		maxDepth = max(maxDepth, len(p))
	}
	for depth := 2; depth <= maxDepth; depth++ {
		var deeper []*block
		for _, b := range blocks {
			deeper = append(deeper, group(b.dev, b.ops, depth)...)
		}
		if len(deeper) > o.MaxBlocks {
			break
		}
		blocks = deeper
	}
	return blocks
}

// blockMS is the time a block's ops computed.
func blockMS(l *layout, b *block) float64 {
	var t float64
	for _, i := range b.ops {
		t += busyMS(&l.p.Ops[i])
	}
	return t
}

// mergeBlocks halves the blocks of every device, joining neighbours,
// until at most limit remain.
func mergeBlocks(blocks []*block, limit int) []*block {
	for len(blocks) > limit {
		var out []*block
		for i := 0; i < len(blocks); i++ {
			b := blocks[i]
			if i+1 < len(blocks) && blocks[i+1].dev == b.dev {
				n := blocks[i+1]
				b = &block{dev: b.dev, path: commonPrefix(b.path, n.path), phase: joinPhase(b.phase, n.phase), ops: append(slices.Clip(b.ops), n.ops...)}
				i++
			}
			out = append(out, b)
		}
		if len(out) == len(blocks) {
			break // one block per device already
		}
		blocks = out
	}
	return blocks
}

func commonPrefix(a, b []string) []string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}

func joinPhase(a, b string) string {
	if a == b {
		return a
	}
	return "mixed"
}

// blockLabel names a block and gives its ops, time and bytes.
func blockLabel(l *layout, b *block, paramBytes, outBytes int64, critical bool) string {
	name := "/" + strings.Join(b.path, "/")
	if len(b.path) == 0 {
		name = "(top level)"
		if b.phase == "update" {
			name = "optimizer"
		}
	}
	// A block that spans submodules names the first and last it ran.
	if b.phase != "update" {
		var first, last string
		for _, i := range b.ops {
			if p := modulePath(l.p.Ops[i].Name); len(p) > len(b.path) && slices.Equal(p[:len(b.path)], b.path) {
				if first == "" {
					first = p[len(b.path)]
				}
				last = p[len(b.path)]
			}
		}
		top := len(b.path) == 0
		switch {
		case first != "" && first != last && top:
			name = fmt.Sprintf("/%s .. /%s", first, last)
		case first != "" && first != last:
			name += fmt.Sprintf(": %s .. %s", first, last)
		case first != "" && top:
			name = "/" + first
		case first != "":
			name += "/" + first
		}
	}
	s := fmt.Sprintf("%s\n%s: %s, %s", name, b.phase, count(len(b.ops), "op", "ops"), formatMS(blockMS(l, b)))
	if paramBytes > 0 || outBytes > 0 {
		s += fmt.Sprintf("\nparams %s, writes %s", formatBytes(paramBytes), formatBytes(outBytes))
	}
	if critical {
		s += "\n(critical path)"
	}
	return s
}

// writeModules draws the module view: stage and device clusters, blocks
// inside them, edges between blocks labelled with what crosses devices,
// the critical path in red.
func writeModules(d *dot, l *layout, o Options) {
	blocks := moduleBlocks(l, o)
	t := newTimeline(l)
	cp := t.criticalPath()
	blockOf := make([]int, len(l.p.Ops))
	for i := range blockOf {
		blockOf[i] = -1
	}
	critical := make([]bool, len(blocks))
	for k, b := range blocks {
		for _, i := range b.ops {
			blockOf[i] = k
			critical[k] = critical[k] || cp.ops[i]
		}
	}
	g := l.g
	// Bytes each block reads as parameters and writes as outputs, per
	// replica and micro-batch for activations.
	params, outs := make([]int64, len(blocks)), make([]int64, len(blocks))
	seenParam := map[[2]int]bool{}
	type edgeKey struct{ from, to int }
	type edgeSum struct {
		tensors  int
		bytes    int64 // bytes copied between devices
		ms       float64
		critical bool
	}
	edges := map[edgeKey]*edgeSum{}
	copies := map[string][]plan.Transfer{}
	for _, tr := range l.p.Transfers {
		copies[tr.Tensor] = append(copies[tr.Tensor], tr)
	}
	for id := range g.Ops {
		i, ok := l.opIndex[g.Ops[id].Name]
		if !ok || blockOf[i] < 0 {
			continue
		}
		k := blockOf[i]
		share := shareOf(l, i)
		for _, out := range g.Ops[id].Outputs {
			outs[k] += g.Tensors[out].Bytes() / share
		}
		for _, in := range g.Ops[id].Inputs {
			tn := &g.Tensors[in]
			if tn.Producer == graph.NoOp {
				if tn.Kind.IsResident() && !seenParam[[2]int{k, int(in)}] {
					seenParam[[2]int{k, int(in)}] = true
					params[k] += tn.Bytes()
				}
				continue
			}
			p, ok := l.opIndex[g.Ops[tn.Producer].Name]
			if !ok || blockOf[p] < 0 || blockOf[p] == k {
				continue
			}
			e := edges[edgeKey{blockOf[p], k}]
			if e == nil {
				e = &edgeSum{}
				edges[edgeKey{blockOf[p], k}] = e
			}
			e.tensors++
			e.critical = e.critical || cp.edges[[2]int{p, i}]
			for _, tr := range copies[tn.Name] {
				if tr.To == l.p.Ops[i].Device && tr.From == l.p.Ops[p].Device {
					e.bytes += tr.Bytes
					e.ms += tr.EndMS - tr.StartMS
				}
			}
		}
	}

	byDev := make([][]int, len(l.p.Devices))
	for k, b := range blocks {
		byDev[b.dev] = append(byDev[b.dev], k)
	}
	drawDevice := func(dev int) {
		if len(byDev[dev]) == 0 {
			return
		}
		d.open(fmt.Sprintf("dev%d", dev), attr{"label", deviceLabel(l.p, dev)}, attr{"style", "rounded"}, attr{"color", "#666666"}, attr{"fontsize", "11"})
		for _, k := range byDev[dev] {
			attrs := []attr{{"label", blockLabel(l, blocks[k], params[k], outs[k], critical[k])}, {"fillcolor", color(dev)}}
			if critical[k] {
				attrs = append(attrs, attr{"color", criticalColor}, attr{"penwidth", "2.5"})
			}
			d.node(fmt.Sprintf("b%d", k), attrs...)
		}
		d.close()
	}
	drawStages(d, l, drawDevice)
	keys := make([]edgeKey, 0, len(edges))
	for k := range edges {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b edgeKey) int {
		if a.from != b.from {
			return a.from - b.from
		}
		return a.to - b.to
	})
	// Within a device, only edges between consecutive blocks are drawn:
	// a backward block reads the activations of every forward block
	// before it, and drawing each such edge buries the picture. Every edge
	// that crosses devices, and every edge of the critical path, is drawn.
	next := map[int]int{}
	for _, ks := range byDev {
		for j := 1; j < len(ks); j++ {
			next[ks[j-1]] = ks[j]
		}
	}
	// Copies far smaller than the largest (a shape or a mask sent to
	// every stage) are counted in the caption, not drawn.
	var most int64
	for _, e := range edges {
		most = max(most, e.bytes)
	}
	var hidden int
	var hiddenBytes int64
	for _, k := range keys {
		e := edges[k]
		var attrs []attr
		if blocks[k.from].dev == blocks[k.to].dev && !e.critical {
			if n, ok := next[k.from]; !ok || n != k.to {
				continue
			}
		}
		if blocks[k.from].dev != blocks[k.to].dev && !e.critical && e.bytes*smallCopyRatio < most {
			hidden++
			hiddenBytes += e.bytes
			continue
		}
		if blocks[k.from].dev != blocks[k.to].dev {
			attrs = append(attrs, attr{"color", transferColor}, attr{"penwidth", "1.5"},
				attr{"label", fmt.Sprintf("%s\n%s", formatBytes(e.bytes), formatMS(e.ms))}, attr{"fontcolor", transferColor})
		}
		if e.critical {
			attrs = append(attrs, attr{"color", criticalColor}, attr{"penwidth", "2.5"})
		}
		d.edge(fmt.Sprintf("b%d", k.from), fmt.Sprintf("b%d", k.to), attrs...)
	}
	if hidden > 0 {
		d.node("small", attr{"label", fmt.Sprintf("%s not drawn\n(%s in all)", count(hidden, "smaller flow", "smaller flows"), formatBytes(hiddenBytes))},
			attr{"shape", "note"}, attr{"fillcolor", idleColor}, attr{"fontsize", "9"})
	}
}

// smallCopyRatio: flows between devices under 1/smallCopyRatio of the
// largest are not drawn.
const smallCopyRatio = 1000

// shareOf is what an op's activations are divided by on one device: its
// stage's replicas times the micro-batches, for ops run per micro-batch.
func shareOf(l *layout, i int) int64 {
	share := int64(1)
	if st := l.p.Stage(l.opStage[i]); st != nil && st.Replicas > 1 {
		share *= int64(st.Replicas)
	}
	if len(l.p.Ops[i].Runs) > 1 {
		share *= int64(len(l.p.Ops[i].Runs))
	}
	return share
}

// forEachStage calls f with each stage (nil when the plan is one plain
// stage) and the first-replica devices it draws, in stage order, then
// with nil and the devices in no stage.
func forEachStage(l *layout, f func(st *plan.Stage, devs []int)) {
	if !l.staged() {
		var devs []int
		for dev := range l.p.Devices {
			devs = append(devs, dev)
		}
		f(nil, devs)
		return
	}
	for k := range l.p.Stages {
		st := &l.p.Stages[k]
		first := st.Devices
		if len(st.ReplicaDevices) > 0 {
			first = st.ReplicaDevices[0]
		}
		var devs []int
		for _, name := range first {
			if dev, ok := l.devIndex[name]; ok {
				devs = append(devs, dev)
			}
		}
		f(st, devs)
	}
}
