package sweep

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
)

// The picture's geometry, in pixels.
const (
	panelW, panelH = 340, 240
	padLeft        = 64
	padRight       = 16
	padTop         = 34
	padBottom      = 46
	legendH        = 28
)

// palette colours the device types (Okabe and Ito's colour-blind-safe
// set), in sweep order.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

// WriteSVG draws r's scaling curves: for every batch size a panel of
// throughput (samples/s) against device count, one line per device type,
// and where the template priced the types a second row of samples per
// dollar. Counts are spaced evenly in sweep order; a point with no plan
// that fits breaks its line and shows as a cross on the axis.
func WriteSVG(w io.Writer, r *Result) error {
	var types []string
	var counts []int
	var batches []int64
	priced := false
	for _, p := range r.Points {
		if !slices.Contains(types, p.Type) {
			types = append(types, p.Type)
		}
		if !slices.Contains(counts, p.Devices) {
			counts = append(counts, p.Devices)
		}
		if !slices.Contains(batches, p.Batch) {
			batches = append(batches, p.Batch)
		}
		priced = priced || p.SamplesPerDollar > 0
	}
	slices.Sort(counts)
	slices.Sort(batches)
	rows := []metric{{"samples/s", func(p Point) float64 { return p.ThroughputSamplesPerS }}}
	if priced {
		rows = append(rows, metric{"samples per dollar", func(p Point) float64 { return p.SamplesPerDollar }})
	}
	width := len(batches) * panelW
	height := legendH + len(rows)*panelH + 24
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="8" y="18" font-size="14" font-weight="bold">%s (%s): predicted throughput against device count</text>`+"\n", esc(r.Job), esc(r.Mode))
	// Legend, right of the title row's second line.
	x := 8
	for i, t := range types {
		c := palette[i%len(palette)]
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/><circle cx="%d" cy="%d" r="3.5" fill="%s"/>`,
			x, legendH+6, x+22, legendH+6, c, x+11, legendH+6, c)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+28, legendH+10, esc(t))
		x += 40 + 7*len(t)
	}
	fmt.Fprintf(b, `<path d="M%d %dl8 8m0 -8l-8 8" stroke="#444" stroke-width="2"/><text x="%d" y="%d">no plan fits</text>`+"\n", x, legendH+2, x+14, legendH+10)
	for ri, m := range rows {
		top := legendH + 16 + ri*panelH
		for bi, batch := range batches {
			left := bi * panelW
			title := "batch " + strconv.FormatInt(batch, 10)
			if batch == 0 {
				title = "the model's batch"
			}
			panel(b, r, m, title, types, counts, batch, left, top)
		}
	}
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

// metric is one row of panels: what it plots.
type metric struct {
	name  string
	value func(Point) float64
}

// panel draws one batch's curves of one metric with its axes.
func panel(b *bufio.Writer, r *Result, m metric, title string, types []string, counts []int, batch int64, left, top int) {
	x0, y0 := left+padLeft, top+padTop
	w, h := panelW-padLeft-padRight, panelH-padTop-padBottom
	hi := 0.0
	for _, p := range r.Points {
		if p.Batch == batch {
			hi = math.Max(hi, m.value(p))
		}
	}
	step, top1 := niceScale(hi)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" font-weight="bold">%s, %s</text>`+"\n", x0+w/2, top+padTop-10, esc(m.name), esc(title))
	xAt := func(i int) float64 {
		if len(counts) == 1 {
			return float64(x0) + float64(w)/2
		}
		return float64(x0) + float64(w)*float64(i)/float64(len(counts)-1)
	}
	yAt := func(v float64) float64 { return float64(y0+h) - float64(h)*v/top1 }
	// Grid and y ticks.
	for v := 0.0; v <= top1*(1+1e-9); v += step {
		y := yAt(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`, x0, y, x0+w, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", x0-6, y+4, tick(v))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`, x0, y0+h, x0+w, y0+h)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`+"\n", x0, y0, x0, y0+h)
	for i, c := range counts {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%d</text>`, xAt(i), y0+h+16, c)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">devices</text>`+"\n", x0+w/2, y0+h+34)
	for ti, t := range types {
		c := palette[ti%len(palette)]
		var path []string
		for i, n := range counts {
			p, ok := find(r, t, n, batch)
			if !ok {
				continue
			}
			v := m.value(p)
			if !p.Fits || v == 0 {
				if len(path) > 1 {
					fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", join(path), c)
				}
				path = nil
				// Crosses of several types at one count sit side by side.
				x, y := xAt(i)+float64(6*ti-3*(len(types)-1)), float64(y0+h)
				fmt.Fprintf(b, `<path d="M%.1f %.1fl8 8m0 -8l-8 8" stroke="%s" stroke-width="2"><title>%s x%d: %s</title></path>`+"\n",
					x-4, y-4, c, esc(t), n, esc(p.Reason))
				continue
			}
			x, y := xAt(i), yAt(v)
			path = append(path, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s x%d: %s %s (%s)</title></circle>`+"\n",
				x, y, c, esc(t), n, tick(v), esc(m.name), esc(p.Strategy))
		}
		if len(path) > 1 {
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", join(path), c)
		}
	}
}

func find(r *Result, typ string, n int, batch int64) (Point, bool) {
	for _, p := range r.Points {
		if p.Type == typ && p.Devices == n && p.Batch == batch {
			return p, true
		}
	}
	return Point{}, false
}

func join(pts []string) string {
	s := ""
	for i, p := range pts {
		if i > 0 {
			s += " "
		}
		s += p
	}
	return s
}

// niceScale picks a tick step of 1, 2 or 5 times a power of ten giving
// about five ticks up to at least hi, and the axis top.
func niceScale(hi float64) (step, top float64) {
	if !(hi > 0) {
		return 1, 1
	}
	raw := hi / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 5, 10} {
		if step = f * mag; step >= raw {
			break
		}
	}
	return step, math.Ceil(hi/step-1e-9) * step
}

// tick prints an axis value without trailing noise.
func tick(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case v >= 10:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func esc(s string) string { return html.EscapeString(s) }
