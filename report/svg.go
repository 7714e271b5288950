package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/plan"
)

// svgChart is one inline SVG picture in viewBox units. Elements are drawn
// in the order of the fields: grid lines under bars, bars under curves,
// text on top. Every value is a preformatted string, so the template only
// escapes and places them.
type svgChart struct {
	W, H  int
	Label string    // the picture's accessible name
	Class string    // the svg element's class
	Bands []svgRect // backgrounds, under the grid
	Lines []svgLine
	Rects []svgRect
	Paths []svgPath
	Dots  []svgDot
	Texts []svgText
}

type svgLine struct{ X1, Y1, X2, Y2, Class string }

type svgRect struct {
	X, Y, W, H, Class string
	// Title is the tooltip; empty: none.
	Title string
}

type svgPath struct{ D, Class, Title string }

type svgDot struct{ X, Y, R, Class, Title string }

type svgText struct {
	X, Y, Class string
	// Anchor is start, middle or end.
	Anchor string
	Text   string
	Title  string
}

func (c *svgChart) line(x1, y1, x2, y2 float64, class string) {
	c.Lines = append(c.Lines, svgLine{num(x1), num(y1), num(x2), num(y2), class})
}

func (c *svgChart) rect(x, y, w, h float64, class, title string) {
	c.Rects = append(c.Rects, svgRect{num(x), num(y), num(w), num(h), class, title})
}

func (c *svgChart) text(x, y float64, anchor, class, text, title string) {
	c.Texts = append(c.Texts, svgText{X: num(x), Y: num(y), Class: class, Anchor: anchor, Text: text, Title: title})
}

// num prints a coordinate with one decimal, the ".0" dropped: a tenth of
// a pixel is below what a screen shows, and short numbers keep big
// charts small.
func num(v float64) string {
	v = math.Round(v*10) / 10
	if v == 0 {
		return "0" // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// axis is a linear scale from data values to viewBox units.
type axis struct {
	lo, hi   float64 // data range
	from, to float64 // viewBox range
}

func (a axis) at(v float64) float64 {
	if a.hi <= a.lo {
		return a.from
	}
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// ticks returns round values (1, 2 or 5 times a power of ten) from 0 up
// to hi, about n of them.
func ticks(hi float64, n int) (vals []float64, step float64) {
	if hi <= 0 || n < 1 || math.IsInf(hi, 0) || math.IsNaN(hi) {
		return []float64{0}, 0
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	for i := 0; ; i++ {
		v := float64(i) * step
		if v > hi*(1+1e-9) {
			break
		}
		vals = append(vals, v)
	}
	return vals, step
}

// tickLabel prints a tick value with as many decimals as its step needs.
func tickLabel(v, step float64) string {
	decimals := 0
	if step > 0 && step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// byteUnit picks the unit memory ticks are labelled in.
func byteUnit(most float64) (float64, string) {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	u := 1.0
	i := 0
	for most/u >= 1024 && i < len(units)-1 {
		u *= 1024
		i++
	}
	return u, units[i]
}

// Formatting shared by the tables and the tooltips.

func fmtMS(v float64) string { return fmt.Sprintf("%.3f ms", v) }

func fmtNum3(v float64) string { return fmt.Sprintf("%.3f", v) }

func fmtPct(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func fmtBytes(b int64) string { return cluster.FormatBytes(b) }

// shortMS prints a duration for a chart label: three significant digits.
func shortMS(ms float64) string { return plan.FormatMS(ms) }

// clip shortens a label to n characters, eliding the middle, which is
// where module paths differ least.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 5 {
		return s
	}
	head := (n - 1) / 2
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// joinShort joins names, eliding the middle past n.
func joinShort(names []string, n int) string {
	if len(names) <= n || n < 3 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n-2], ", ") + fmt.Sprintf(", … (%d in all), ", len(names)) + names[len(names)-1]
}

// count prints n and a noun, plural unless n is 1: "1 bucket", "2 buckets".
func count(n int, noun string) string { return plan.Count(n, noun, noun+"s") }
