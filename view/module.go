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

// blockKey is an op's block key at a depth.
type blockKey struct {
	path  string
	phase string
}

// moduleBlocks groups each device's kept ops, in the order the device
// ran them, into blocks at the deepest module depth that stays within
// the budget, then merges neighbouring blocks until it does.
func moduleBlocks(l *layout, o Options) []*block {
	groupOf := map[string]string{}
	for _, grp := range o.Groups {
		for _, m := range grp[1:] {
			groupOf[m] = grp[0]
		}
	}
	paths := make([][]string, len(l.p.Ops))
	perDev := make([][]int, len(l.p.Devices))
	maxDepth := 0
	for i := range l.p.Ops {
		if !l.keep(i, o) {
			continue
		}
		op := &l.p.Ops[i]
		paths[i] = modulePath(op.Name)
		if len(paths[i]) == 0 {
			if grp, ok := groupOf[op.Name]; ok {
				paths[i] = []string{"fused " + grp}
			}
		}
		if op.Phase == "update" {
			paths[i] = nil // one block for a device's optimizer step
		}
		maxDepth = max(maxDepth, len(paths[i]))
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
	at := func(depth int) []*block {
		var out []*block
		for d, ops := range perDev {
			var last *block
			var lastKey blockKey
			for _, i := range ops {
				p := paths[i][:min(depth, len(paths[i]))]
				k := blockKey{strings.Join(p, "/"), l.p.Ops[i].Phase}
				if last == nil || k != lastKey {
					last = &block{dev: d, path: p, phase: k.phase}
					lastKey = k
					out = append(out, last)
				}
				last.ops = append(last.ops, i)
			}
		}
		return out
	}
	blocks := at(1)
	for depth := 2; depth <= maxDepth; depth++ {
		deeper := at(depth)
		if len(deeper) > o.MaxBlocks {
			break
		}
		blocks = deeper
	}
	return mergeBlocks(blocks, o.MaxBlocks)
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
	// Merged blocks span modules below their common prefix.
	modules := map[string]bool{}
	for _, i := range b.ops {
		modules[strings.Join(modulePath(l.p.Ops[i].Name), "/")] = true
	}
	if len(modules) > 1 && b.phase != "update" {
		name += fmt.Sprintf(" (%d modules)", len(modules))
	}
	var t float64
	for _, i := range b.ops {
		t += busyMS(&l.p.Ops[i])
	}
	s := fmt.Sprintf("%s\n%s: %d ops, %s", name, b.phase, len(b.ops), formatMS(t))
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
	forEachStage(l, func(st *plan.Stage, devs []int) {
		if st != nil {
			d.open(fmt.Sprintf("stage%d", st.Index), attr{"label", stageLabel(st, true)}, attr{"style", "dashed"}, attr{"color", "#333333"})
		}
		for _, dev := range devs {
			drawDevice(dev)
		}
		if st != nil {
			d.close()
		}
	})
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
	for _, k := range keys {
		e := edges[k]
		var attrs []attr
		if blocks[k.from].dev != blocks[k.to].dev {
			attrs = append(attrs, attr{"color", transferColor}, attr{"penwidth", "1.5"},
				attr{"label", fmt.Sprintf("%s\n%s", formatBytes(e.bytes), formatMS(e.ms))}, attr{"fontcolor", transferColor})
		}
		if e.critical {
			attrs = append(attrs, attr{"color", criticalColor}, attr{"penwidth", "2.5"})
		}
		d.edge(fmt.Sprintf("b%d", k.from), fmt.Sprintf("b%d", k.to), attrs...)
	}
}

// shareOf is what an op's activations are divided by on one device: its
// stage's replicas times the micro-batches, for ops run per micro-batch.
func shareOf(l *layout, i int) int64 {
	share := int64(1)
	if st := l.stage(l.opStage[i]); st != nil && st.Replicas > 1 {
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
