package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/opplace/opplace/plan"
)

// One memory panel's geometry, in viewBox units.
const (
	memW      = 580
	memH      = 184
	memX0     = 66
	memX1     = 528
	gaugeX    = 548 // the capacity gauge right of the curve
	gaugeW    = 14
	memTop    = 16
	memBottom = 150
)

// memPanel is one device's memory over the step (or several devices'
// when their curves are the same: a stage's replicas).
type memPanel struct {
	Title string
	Sub   string
	// Same names the devices with the same curve.
	Same  string
	Over  bool
	Chart *svgChart
}

// buildMemory draws each device's memory curve against its capacity, on
// one scale for every panel so they compare at a glance.
func buildMemory(p *plan.Plan, stageOf map[string]int) (panels []memPanel, notes []string) {
	type group struct {
		dev  *plan.Device
		same []string
	}
	var groups []*group
	byKey := map[string]*group{}
	end := p.PredictedStepMS
	var most int64
	var unused, noCurve []string
	for i := range p.Devices {
		d := &p.Devices[i]
		if len(d.Memory) == 0 {
			if d.PeakMemoryBytes == 0 {
				unused = append(unused, d.Name)
			} else {
				noCurve = append(noCurve, d.Name)
			}
			continue
		}
		most = max(most, d.PeakMemoryBytes)
		for _, s := range d.Memory {
			most = max(most, s.Bytes)
		}
		end = max(end, d.Memory[len(d.Memory)-1].MS)
		key := curveKey(d)
		if g := byKey[key]; g != nil {
			g.same = append(g.same, d.Name)
			continue
		}
		g := &group{dev: d}
		byKey[key] = g
		groups = append(groups, g)
	}
	if len(noCurve) > 0 {
		notes = append(notes, fmt.Sprintf("No memory curve in the plan for %s (a plan written before curves were recorded): the device table gives their peaks.", joinShort(noCurve, 6)))
	}
	if len(unused) > 0 {
		notes = append(notes, fmt.Sprintf("Not drawn, holding nothing: %s.", joinShort(unused, 6)))
	}
	if len(groups) == 0 || most <= 0 || end <= 0 {
		return nil, notes
	}
	// One scale for all: the highest peak, and the capacities when they
	// are near enough to show without flattening the curves.
	top := float64(most) * 1.1
	for _, g := range groups {
		if c := float64(g.dev.MemoryBytes); c > 0 && c <= float64(most)*1.6 {
			top = max(top, c*1.06)
		}
	}
	unit, unitName := byteUnit(top)
	yVals, yStep := ticks(top/unit, 5)
	top = max(top, yVals[len(yVals)-1]*unit)
	x := axis{lo: 0, hi: end, from: memX0, to: memX1}
	y := axis{lo: 0, hi: top, from: memBottom, to: memTop}
	xVals, xStep := ticks(end, 6)
	for _, g := range groups {
		d := g.dev
		c := &svgChart{W: memW, H: memH, Class: "mem", Label: fmt.Sprintf("Memory of %s over the step", d.Name)}
		for _, v := range yVals {
			c.line(memX0, y.at(v*unit), memX1, y.at(v*unit), "grid")
			c.text(memX0-6, y.at(v*unit)+4, "end", "ax", tickLabel(v, yStep)+" "+unitName, "")
		}
		for _, v := range xVals {
			c.line(x.at(v), memBottom, x.at(v), memBottom+4, "axl")
			c.text(x.at(v), memBottom+17, "middle", "ax", tickLabel(v, xStep), "")
		}
		c.text(memX1, memBottom+31, "end", "ax", "time in the step (ms)", "")
		c.line(memX0, memBottom, memX1, memBottom, "axl")
		// The curve: each sample holds until the next, the last until the
		// step ends.
		var line, area strings.Builder
		peakAt := 0
		for i, s := range d.Memory {
			xs, ys := num(x.at(s.MS)), num(y.at(float64(s.Bytes)))
			if i == 0 {
				fmt.Fprintf(&line, "M%s %s", xs, ys)
				fmt.Fprintf(&area, "M%s %sV%s", xs, num(memBottom), ys)
			} else {
				fmt.Fprintf(&line, "H%sV%s", xs, ys)
				fmt.Fprintf(&area, "H%sV%s", xs, ys)
			}
			if s.Bytes > d.Memory[peakAt].Bytes {
				peakAt = i
			}
		}
		fmt.Fprintf(&line, "H%s", num(memX1))
		fmt.Fprintf(&area, "H%sV%sZ", num(memX1), num(memBottom))
		c.Paths = append(c.Paths, svgPath{D: area.String(), Class: "marea"}, svgPath{D: line.String(), Class: "mline"})
		if capBytes := float64(d.MemoryBytes); capBytes > 0 {
			label := "capacity " + fmtBytes(d.MemoryBytes)
			if capBytes <= top {
				cy := y.at(capBytes)
				c.line(memX0, cy, memX1, cy, "cap")
				c.text(memX1-2, cy-4, "end", "capt", label, "")
			}
		}
		// The gauge: the peak against the capacity, whatever the scale.
		if d.MemoryBytes > 0 {
			f := float64(d.PeakMemoryBytes) / float64(d.MemoryBytes)
			gaugeTitle := fmt.Sprintf("peak %s of %s capacity (%s)", fmtBytes(d.PeakMemoryBytes), fmtBytes(d.MemoryBytes), fmtPct(f))
			c.rect(gaugeX, memTop, gaugeW, memBottom-memTop, "gbg", gaugeTitle)
			fill := min(f, 1) * (memBottom - memTop)
			class := "gok"
			switch {
			case f > 1:
				class = "gbad"
			case f > 0.9:
				class = "gwarn"
			}
			c.rect(gaugeX, memBottom-fill, gaugeW, fill, class, gaugeTitle)
			c.text(gaugeX+gaugeW/2, memBottom+17, "middle", "gaut", fmt.Sprintf("%.0f%%", 100*f), "")
			c.text(gaugeX+gaugeW/2, memTop-5, "middle", "ax", "used", "")
		}
		pk := d.Memory[peakAt]
		px, py := x.at(pk.MS), y.at(float64(pk.Bytes))
		peakTitle := fmt.Sprintf("peak %s from %s", fmtBytes(pk.Bytes), fmtMS(pk.MS))
		c.Dots = append(c.Dots, svgDot{X: num(px), Y: num(py), R: "3.5", Class: "pk", Title: peakTitle})
		anchor, tx := "start", px+7
		if px > (memX0+memX1)/2 {
			anchor, tx = "end", px-7
		}
		c.text(tx, max(py-6, memTop+10), anchor, "pkt", fmt.Sprintf("peak %s at %s", fmtBytes(pk.Bytes), shortMS(pk.MS)), "")
		panel := memPanel{Title: d.Name, Chart: c}
		parts := []string{d.Type}
		if s, ok := stageOf[d.Name]; ok && len(p.Stages) > 1 {
			parts = append(parts, fmt.Sprintf("stage %d", s))
		}
		peak := fmt.Sprintf("peak %s", fmtBytes(d.PeakMemoryBytes))
		if d.MemoryBytes > 0 {
			peak += fmt.Sprintf(" of %s (%s)", fmtBytes(d.MemoryBytes), fmtPct(float64(d.PeakMemoryBytes)/float64(d.MemoryBytes)))
		}
		if d.MemoryBytes > 0 && float64(d.MemoryBytes) > top {
			peak += ", capacity above the scale"
		}
		parts = append(parts, peak)
		if d.MemoryBytes > 0 && d.PeakMemoryBytes > d.MemoryBytes {
			panel.Over = true
			parts = append(parts, "over by "+fmtBytes(d.PeakMemoryBytes-d.MemoryBytes))
		}
		panel.Sub = strings.Join(parts, " · ")
		if len(g.same) > 0 {
			panel.Same = fmt.Sprintf("Same curve on %s.", joinShort(g.same, 6))
		}
		panels = append(panels, panel)
	}
	return panels, notes
}

// curveKey identifies a device's curve and capacity, so devices with the
// same (a stage's replicas) share one panel.
func curveKey(d *plan.Device) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d|%d|", d.Type, d.MemoryBytes, d.PeakMemoryBytes)
	for _, s := range d.Memory {
		b.WriteString(strconv.FormatFloat(s.MS, 'g', -1, 64))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(s.Bytes, 10))
		b.WriteByte(',')
	}
	return b.String()
}
