package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/opplace/opplace/plan"
)

// The Gantt chart's geometry, in viewBox units (one unit is one pixel at
// the page's full width).
const (
	chartW     = 1200
	ganttX0    = 190  // where the time axis starts; labels left of it
	ganttX1    = 1180 // where it ends
	opRowH     = 16
	linkRowH   = 10
	rowGap     = 4
	groupGap   = 8
	ganttTop   = 22
	ganttAxisH = 38
	// maxLinkRows is the most transfer rows drawn one per device pair;
	// past it transfers get one row per sending device.
	maxLinkRows = 16
)

// ganttSpan is one bar: an op run, a transfer or an all-reduce bucket.
type ganttSpan struct {
	start, end float64
	class      string
	phase      string // forward, backward, update, transfer, all-reduce
	name, typ  string
	mb         int // micro-batch; -1 when the op runs once for the step
	bytes      int64
	// what the tooltip says after the name (transfers: their endpoints)
	detail string
}

type ganttRow struct {
	label, tag, title string
	kind              string // ops, link, allreduce
	spans             []ganttSpan
	newGroup          bool // starts a device's group of rows
}

// gantt is the schedule chart with the notes that explain it.
type gantt struct {
	Chart  *svgChart
	Legend []legendItem
	Notes  []string
}

type legendItem struct{ Class, Label string }

// phase classes: alternate micro-batches alternate shades, so a
// pipeline's interleaving shows.
func phaseClass(phase string, mb int) string {
	shade := "0"
	if mb > 0 && mb%2 == 1 {
		shade = "1"
	}
	switch phase {
	case "forward":
		return "gf" + shade
	case "backward":
		return "gb" + shade
	case "update":
		return "gu"
	}
	return "gx"
}

// buildGantt lays the step out: one row per device that runs ops, the
// transfers under their sender, the all-reduces at the bottom.
func buildGantt(p *plan.Plan, stageOf map[string]int) *gantt {
	g := &gantt{}
	end := p.PredictedStepMS
	devIndex := make(map[string]int, len(p.Devices))
	for i, d := range p.Devices {
		devIndex[d.Name] = i
	}
	opRows := make([]*ganttRow, len(p.Devices))
	runs := 0
	phases := map[string]bool{}
	for _, op := range p.Ops {
		d := devIndex[op.Device]
		r := opRows[d]
		if r == nil {
			r = &ganttRow{label: op.Device, kind: "ops", title: op.Device}
			if s, ok := stageOf[op.Device]; ok {
				var tags []string
				if len(p.Stages) > 1 {
					tags = append(tags, fmt.Sprintf("stage %d", s))
				}
				if reps := replicas(p, s); reps > 1 {
					tags = append(tags, fmt.Sprintf("×%d", reps))
				}
				st := p.Stage(s)
				if st != nil && st.TensorParallel > 1 {
					tags = append(tags, fmt.Sprintf("tensor %d", st.TensorParallel))
				}
				r.tag = strings.Join(tags, " ")
				r.title = fmt.Sprintf("%s, stage %d", op.Device, s)
				if reps := replicas(p, s); reps > 1 {
					r.title += fmt.Sprintf(", first of %d replicas", reps)
				}
				if st != nil && st.TensorParallel > 1 {
					r.title += fmt.Sprintf(", first of a tensor-parallel group of %d running its share of every op in lockstep", st.TensorParallel)
				}
			}
			opRows[d] = r
		}
		add := func(mb int, start, stop float64) {
			end = max(end, stop)
			runs++
			phases[op.Phase] = true
			r.spans = append(r.spans, ganttSpan{start: start, end: stop, class: phaseClass(op.Phase, mb), phase: op.Phase,
				name: op.Name, typ: op.Type, mb: mb})
		}
		if len(op.Runs) == 0 {
			add(-1, op.StartMS, op.EndMS)
		}
		for _, run := range op.Runs {
			add(run.MicroBatch, run.StartMS, run.EndMS)
		}
	}
	// Transfers: one row per device pair when there are few pairs, else
	// one row per sender.
	type link struct{ from, to int }
	links := map[link]*ganttRow{}
	for _, t := range p.Transfers {
		links[link{devIndex[t.From], devIndex[t.To]}] = nil
	}
	perLink := len(links) <= maxLinkRows
	linkRows := make([][]*ganttRow, len(p.Devices))
	for _, t := range p.Transfers {
		from, to := devIndex[t.From], devIndex[t.To]
		k := link{from, to}
		if !perLink {
			k.to = -1
		}
		r := links[k]
		if r == nil {
			if perLink {
				r = &ganttRow{label: "→ " + t.To, kind: "link", title: fmt.Sprintf("transfers from %s to %s", t.From, t.To)}
			} else {
				r = &ganttRow{label: "→ sends", kind: "link", title: fmt.Sprintf("transfers from %s", t.From)}
			}
			links[k] = r
			linkRows[from] = append(linkRows[from], r)
		}
		end = max(end, t.EndMS)
		mb := t.MicroBatch
		if p.MicroBatches <= 1 {
			mb = -1
		}
		r.spans = append(r.spans, ganttSpan{start: t.StartMS, end: t.EndMS, class: "gt", phase: "transfer", name: t.Tensor,
			mb: mb, bytes: t.Bytes, detail: fmt.Sprintf("%s → %s", t.From, t.To)})
	}
	// Devices in stage order (a pipeline's rows then read top to bottom
	// as its data flows), then in the plan's order.
	order := make([]int, len(p.Devices))
	for d := range order {
		order[d] = d
	}
	stageRank := func(d int) int {
		if s, ok := stageOf[p.Devices[d].Name]; ok {
			return s
		}
		return math.MaxInt
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(stageRank(a), stageRank(b)) })
	var rows []*ganttRow
	for _, d := range order {
		lr := linkRows[d]
		slices.SortStableFunc(lr, func(a, b *ganttRow) int { return strings.Compare(a.label, b.label) })
		if opRows[d] == nil && len(lr) == 0 {
			continue
		}
		if opRows[d] == nil {
			opRows[d] = &ganttRow{label: p.Devices[d].Name, kind: "ops", title: p.Devices[d].Name + " (runs no ops)"}
		}
		opRows[d].newGroup = true
		rows = append(rows, opRows[d])
		rows = append(rows, lr...)
	}
	// All-reduces: one row per stage, its buckets one after another.
	arRows := map[int]*ganttRow{}
	var arStages []int
	for _, a := range p.AllReduces {
		r := arRows[a.Stage]
		if r == nil {
			r = &ganttRow{label: "all-reduce", kind: "allreduce", newGroup: len(arStages) == 0,
				title: fmt.Sprintf("gradient all-reduce of stage %d across %s", a.Stage, joinShort(a.Devices, 6))}
			if len(p.Stages) > 1 {
				r.tag = fmt.Sprintf("stage %d", a.Stage)
			}
			arRows[a.Stage] = r
			arStages = append(arStages, a.Stage)
		}
		end = max(end, a.EndMS)
		r.spans = append(r.spans, ganttSpan{start: a.StartMS, end: a.EndMS, class: "ga", phase: "all-reduce",
			name: fmt.Sprintf("stage %d gradients", a.Stage), mb: -1, bytes: a.Bytes,
			detail: fmt.Sprintf("across %d devices", len(a.Devices))})
	}
	slices.Sort(arStages)
	for _, s := range arStages {
		rows = append(rows, arRows[s])
	}
	if len(rows) == 0 || end <= 0 {
		g.Notes = append(g.Notes, "The plan has no op runs with a time to draw.")
		return g
	}

	// Layout.
	h := float64(ganttTop)
	ys := make([]float64, len(rows))
	for i, r := range rows {
		if r.newGroup && i > 0 {
			h += groupGap
		}
		ys[i] = h
		h += rowHeight(r) + rowGap
	}
	h += ganttAxisH
	c := &svgChart{W: chartW, H: int(math.Ceil(h)), Class: "gantt",
		Label: fmt.Sprintf("Schedule of the step: %d rows over %s", len(rows), shortMS(end))}
	x := axis{lo: 0, hi: end, from: ganttX0, to: ganttX1}
	// Device bands behind each device's rows.
	for i, r := range rows {
		if !r.newGroup || r.kind == "allreduce" {
			continue
		}
		j := i + 1
		for j < len(rows) && !rows[j].newGroup {
			j++
		}
		bottom := ys[j-1] + rowHeight(rows[j-1])
		c.Bands = append(c.Bands, svgRect{X: "4", Y: num(ys[i] - 2), W: num(chartW - 8), H: num(bottom - ys[i] + 4), Class: "band"})
	}
	vals, step := ticks(end, 10)
	axisY := h - ganttAxisH + 4
	for _, v := range vals {
		c.line(x.at(v), ganttTop-4, x.at(v), axisY, "grid")
		c.text(x.at(v), axisY+14, "middle", "ax", tickLabel(v, step), "")
	}
	c.text(ganttX1, axisY+26, "end", "ax", "time in the step (ms)", "")
	c.line(ganttX0, axisY, ganttX1, axisY, "axl")
	if p.PredictedStepMS > 0 {
		sx := x.at(p.PredictedStepMS)
		c.line(sx, ganttTop-8, sx, axisY, "stepl")
		c.text(sx-4, ganttTop-10, "end", "stept", "predicted step "+fmtMS(p.PredictedStepMS), "")
	}
	rects := 0
	for i, r := range rows {
		rh := rowHeight(r)
		cls := "rl"
		if r.kind != "ops" {
			cls = "rk"
		}
		c.text(12, ys[i]+rh-3, "start", cls, clip(r.label, 24), r.title)
		if r.tag != "" {
			c.text(ganttX0-8, ys[i]+rh-3, "end", "rt", r.tag, "")
		}
		rects += drawRow(c, r, ys[i], rh, x)
	}
	g.Chart = c
	for _, ph := range []struct{ phase, class, label string }{
		{"forward", "gf0", "forward"}, {"backward", "gb0", "backward"}, {"update", "gu", "optimizer update"},
	} {
		if phases[ph.phase] {
			g.Legend = append(g.Legend, legendItem{ph.class, ph.label})
		}
	}
	if len(p.Transfers) > 0 {
		g.Legend = append(g.Legend, legendItem{"gt", "transfer"})
	}
	if len(p.AllReduces) > 0 {
		g.Legend = append(g.Legend, legendItem{"ga", "all-reduce"})
	}
	if p.MicroBatches > 1 {
		g.Legend = append(g.Legend, legendItem{"gf1", "odd micro-batches (lighter shade)"})
	}
	px := end / (ganttX1 - ganttX0)
	g.Notes = append(g.Notes, fmt.Sprintf("%s, %s and %s drawn as %s. Runs narrower than a pixel (%s at full width) are merged into one bar per row and pixel column, contiguous columns of one phase into one bar; hover a bar for its ops, micro-batches and times.",
		count(runs, "op run"), count(len(p.Transfers), "transfer"), count(len(p.AllReduces), "all-reduce bucket"), count(rects, "bar"), shortMS(px)))
	if !perLink {
		g.Notes = append(g.Notes, fmt.Sprintf("Transfers cross %d device pairs, so each device has one row of everything it sends.", len(links)))
	}
	return g
}

// replicas is stage s's replica count.
func replicas(p *plan.Plan, s int) int {
	if st := p.Stage(s); st != nil {
		return st.Replicas
	}
	return 1
}

func rowHeight(r *ganttRow) float64 {
	if r.kind == "ops" {
		return opRowH
	}
	return linkRowH
}

// spanGroup is the spans merged into one bar.
type spanGroup struct {
	x0, x1     float64 // viewBox
	lastCol    float64
	start, end float64 // ms
	busy       map[string]float64
	count      map[string]int
	first      *ganttSpan
	last       *ganttSpan
	n          int
	bytes      int64
	mbLo, mbHi int
	class      string
}

// drawRow draws a row's spans, merging those narrower than a pixel, and
// returns the bars drawn.
func drawRow(c *svgChart, r *ganttRow, y, h float64, x axis) int {
	spans := r.spans
	slices.SortStableFunc(spans, func(a, b ganttSpan) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end))
	})
	drawn := 0
	var g *spanGroup
	flush := func() {
		if g == nil {
			return
		}
		w := max(g.x1-g.x0, 1)
		c.rect(g.x0, y, w, h, g.dominant(), g.title())
		drawn++
		g = nil
	}
	for i := range spans {
		s := &spans[i]
		if s.end <= s.start {
			continue // takes no time: nothing to see
		}
		x0, x1 := x.at(s.start), x.at(s.end)
		if x1-x0 >= 1 {
			flush()
			c.rect(x0, y, x1-x0, h, s.class, spanTitle(s))
			drawn++
			continue
		}
		col := math.Floor(x0)
		if g != nil && !(col <= g.lastCol || col == g.lastCol+1 && s.class == g.class && x0 <= g.x1+1) {
			flush()
		}
		if g == nil {
			g = &spanGroup{x0: x0, x1: x1, lastCol: col, start: s.start, end: s.end, busy: map[string]float64{},
				count: map[string]int{}, first: s, mbLo: s.mb, mbHi: s.mb, class: s.class}
		}
		g.add(s, x1, col)
	}
	flush()
	return drawn
}

func (g *spanGroup) add(s *ganttSpan, x1, col float64) {
	g.x1 = max(g.x1, x1)
	g.lastCol = max(g.lastCol, col)
	g.end = max(g.end, s.end)
	g.busy[s.class] += s.end - s.start
	g.count[s.phase]++
	g.last = s
	g.n++
	g.bytes += s.bytes
	g.mbLo, g.mbHi = min(g.mbLo, s.mb), max(g.mbHi, s.mb)
}

// dominant is the class with the most busy time; ties go to the first
// in name order, so output is deterministic.
func (g *spanGroup) dominant() string {
	best, most := "", -1.0
	for _, k := range sortedKeys(g.busy) {
		if g.busy[k] > most {
			best, most = k, g.busy[k]
		}
	}
	return best
}

func (g *spanGroup) title() string {
	if g.n == 1 {
		return spanTitle(g.first)
	}
	var busy float64
	for _, v := range g.busy {
		busy += v
	}
	var b strings.Builder
	what := "op runs"
	switch g.first.phase {
	case "transfer":
		what = "transfers"
	case "all-reduce":
		what = "all-reduce buckets"
	}
	fmt.Fprintf(&b, "%d %s, each narrower than a pixel\n%s – %s, busy %s", g.n, what, fmtMS(g.start), fmtMS(g.end), fmtMS(busy))
	var parts []string
	for _, ph := range []string{"forward", "backward", "update"} {
		if n := g.count[ph]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", ph, n))
		}
	}
	if len(parts) > 0 {
		b.WriteString("\n" + strings.Join(parts, ", "))
	}
	if g.bytes > 0 {
		b.WriteString("\n" + fmtBytes(g.bytes))
	}
	switch {
	case g.mbLo >= 0 && g.mbLo == g.mbHi:
		fmt.Fprintf(&b, "\nmicro-batch %d", g.mbLo)
	case g.mbLo >= 0:
		fmt.Fprintf(&b, "\nmicro-batches %d–%d", g.mbLo, g.mbHi)
	}
	fmt.Fprintf(&b, "\nfirst: %s\nlast: %s", spanName(g.first), spanName(g.last))
	return b.String()
}

func spanName(s *ganttSpan) string {
	if s.typ != "" {
		return fmt.Sprintf("%s (%s)", s.name, s.typ)
	}
	return s.name
}

// spanTitle is one bar's tooltip.
func spanTitle(s *ganttSpan) string {
	var b strings.Builder
	switch s.phase {
	case "transfer":
		fmt.Fprintf(&b, "transfer of %s\n%s, %s", s.name, s.detail, fmtBytes(s.bytes))
	case "all-reduce":
		fmt.Fprintf(&b, "all-reduce of %s\n%s %s", s.name, fmtBytes(s.bytes), s.detail)
	default:
		fmt.Fprintf(&b, "%s\n%s", spanName(s), s.phase)
	}
	if s.mb >= 0 {
		fmt.Fprintf(&b, ", micro-batch %d", s.mb)
	}
	fmt.Fprintf(&b, "\n%s – %s (%s)", fmtMS(s.start), fmtMS(s.end), fmtMS(s.end-s.start))
	return b.String()
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
