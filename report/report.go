// Package report writes a plan as one self-contained HTML page for a
// launch review: the summary (step, bound, throughput, whether it fits),
// the schedule as a Gantt chart, each device's memory over the step
// against its capacity, the stage table with its split points, every
// strategy auto tried and why it lost, and the device-level Graphviz
// view. Everything is inline (CSS, SVG): the page loads nothing, so it
// can be attached to a review and opened anywhere. The same plan gives
// the same bytes.
package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"html/template"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/opplace/opplace/internal/printable"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/view"
)

// Options tune a report.
type Options struct {
	// Source is how the footer names the plan file ("": not named).
	Source string
	// NoGraphviz leaves the device view out without running dot.
	NoGraphviz bool
	// RenderTimeout bounds Graphviz (0: view.RenderTimeout).
	RenderTimeout time.Duration
}

// Write renders p as an HTML page on w. Graphviz missing or failing
// costs the device view only: the page then says why it is not there.
func Write(ctx context.Context, w io.Writer, p *plan.Plan, o Options) error {
	pg := build(ctx, p, o)
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, pg); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	// Names from the model (in text, titles and the embedded views)
	// reach the page as they are; the template escapes markup, and
	// printable what a browser would act on (controls, bidi overrides).
	_, err := io.WriteString(w, printable.Text(b.String()))
	return err
}

// page is everything the template shows.
type page struct {
	Title    string
	Subtitle string
	Source   string
	Fits     bool
	FitsNote string
	Cards    []card
	Warnings []string

	Devices     []deviceRow
	DeviceNotes []string

	Gantt *gantt

	Memory      []memPanel
	MemoryNotes []string

	Stages      []stageRow
	StageNotes  []string
	ShowModules bool

	CandChart *svgChart
	CandRows  []candRow
	CandNote  string

	Rules []ruleRow

	Graph     template.HTML
	GraphNote string
}

type ruleRow struct {
	Rule, Source, Ops, Devices, Effect string
	Examples                           template.HTML
}

// card is one number of the summary.
type card struct {
	Key, Value, Note string
	Class            string // ok, bad or ""
}

type deviceRow struct {
	Name, Type, Host, Role    string
	Ops, Busy, Util, Resident string
	Peak, Capacity, Used      string
	UsedPct                   string // CSS width of the bar, "42%"
	UsedClass                 string // bar colour: ok, warn, bad
	Over                      bool
}

type stageRow struct {
	Index, Devices, DevicesTitle, Type, Replicas, Ops string
	Time, Compute, Comm, Sync                         string
	AllReduce, AllReduceTime, Sends, Peak, Alive      string
	FirstOp, LastOp, Module                           template.HTML
	Bar                                               *svgChart
	Bottleneck                                        bool
}

type candRow struct {
	Strategy, Family, Shape, Step, Throughput, Peak, Fits, Why string
	Status                                                     string // chosen, slower, nofit, failed, pruned
}

func build(ctx context.Context, p *plan.Plan, o Options) *page {
	pg := &page{
		Title:    "Plan report: " + baseName(p.Model),
		Subtitle: fmt.Sprintf("%s on %s, %s", p.Model, p.Cluster, modeName(p.Mode)),
		Source:   o.Source,
		Fits:     p.Fits,
		Warnings: p.Warnings,
	}
	stageOf := p.DeviceStages()
	summary(pg, p)
	devicesTable(pg, p, stageOf)
	pg.Gantt = buildGantt(p, stageOf)
	if mirrors := mirrorDevices(p, stageOf); len(mirrors) > 0 {
		pg.Gantt.Notes = append([]string{fmt.Sprintf("Rows show the devices that run the plan's ops, the first replica of each stage. The other replicas, on %s (%s), run the same schedule on their share of the batch, so they are not drawn.",
			joinShort(mirrors, 6), count(len(mirrors), "device"))}, pg.Gantt.Notes...)
	}
	pg.Memory, pg.MemoryNotes = buildMemory(p, stageOf)
	stagesTable(pg, p)
	candidates(pg, p)
	rules(pg, p)
	graph(ctx, pg, p, o)
	return pg
}

func summary(pg *page, p *plan.Plan) {
	if p.Fits {
		pg.FitsNote = "Every device's peak memory is within its capacity."
	} else {
		var over []string
		for _, d := range p.Devices {
			if d.MemoryBytes > 0 && d.PeakMemoryBytes > d.MemoryBytes {
				over = append(over, fmt.Sprintf("%s needs %s of %s", d.Name, fmtBytes(d.PeakMemoryBytes), fmtBytes(d.MemoryBytes)))
			}
		}
		pg.FitsNote = "A device exceeds its memory"
		if len(over) > 0 {
			pg.FitsNote += ": " + joinShort(over, 4)
		}
		pg.FitsNote += "."
	}
	strategy := p.Strategy
	cards := []card{{Key: "Predicted step", Value: fmtMS(p.PredictedStepMS), Note: "simulated"}}
	bound := card{Key: "Lower bound", Value: fmtMS(p.LowerBoundMS)}
	if p.LowerBoundKind != "" {
		bound.Note = p.LowerBoundKind
	}
	cards = append(cards, bound)
	if p.LowerBoundMS > 0 {
		cards = append(cards, card{Key: "Gap to the bound", Value: fmtPct(p.Gap), Note: "predicted / bound − 1"})
	}
	if p.ThroughputSamplesPerS > 0 {
		note := ""
		if p.Batch > 0 {
			note = fmt.Sprintf("batch %d", p.Batch)
		}
		cards = append(cards, card{Key: "Throughput", Value: fmt.Sprintf("%.1f samples/s", p.ThroughputSamplesPerS), Note: note})
	}
	fam := p.Family
	if fam == "" {
		fam = "-"
	}
	cards = append(cards, card{Key: "Strategy", Value: strategy, Note: fam})
	modeCard := card{Key: "Mode", Value: modeName(p.Mode)}
	if p.Precision != "" {
		modeCard.Note = "precision " + p.Precision
	}
	cards = append(cards, modeCard)
	mb := p.MicroBatches
	if mb == 0 {
		mb = 1
	}
	mbCard := card{Key: "Micro-batches", Value: fmt.Sprint(mb)}
	var mbNotes []string
	if p.Schedule != "" {
		mbNotes = append(mbNotes, p.Schedule+" schedule")
	}
	if len(p.Stages) > 1 {
		mbNotes = append(mbNotes, fmt.Sprintf("bubble %s", fmtPct(p.BubbleFraction)))
	}
	mbCard.Note = strings.Join(mbNotes, ", ")
	cards = append(cards, mbCard)
	nStages := max(len(p.Stages), 1)
	stageNote := ""
	if p.Replicas > 1 {
		stageNote = fmt.Sprintf("up to %d replicas", p.Replicas)
	}
	if p.BottleneckMS > 0 && len(p.Stages) > 1 {
		if stageNote != "" {
			stageNote += ", "
		}
		stageNote += fmt.Sprintf("bottleneck %s per micro-batch", fmtMS(p.BottleneckMS))
	}
	cards = append(cards, card{Key: "Stages", Value: fmt.Sprint(nStages), Note: stageNote})
	used := 0
	for _, d := range p.Devices {
		if d.Ops > 0 || d.PeakMemoryBytes > 0 {
			used++
		}
	}
	cards = append(cards, card{Key: "Devices", Value: fmt.Sprintf("%d of %d", used, len(p.Devices)), Note: "hold memory in the step"})
	cards = append(cards, card{Key: "Across devices", Value: fmtBytes(p.CrossDeviceBytes), Note: count(len(p.Transfers), "transfer")})
	if len(p.AllReduces) > 0 {
		// The replicas' buckets, and the tensor-parallel groups'
		// collectives (which name the tensor they collect).
		var b, tb int64
		var n, tn int
		for _, a := range p.AllReduces {
			if a.Tensor != "" {
				tb += a.Bytes
				tn++
				continue
			}
			b += a.Bytes
			n++
		}
		if n > 0 {
			cards = append(cards, card{Key: "All-reduce", Value: fmtBytes(b), Note: count(n, "bucket") + " of gradients per replica"})
		}
		if tn > 0 {
			cards = append(cards, card{Key: "Tensor-parallel", Value: fmtBytes(tb), Note: count(tn, "collective") + fmt.Sprintf(" in groups of %d", p.TensorParallel)})
		}
	}
	if p.EstimatedStepMS > 0 && p.PredictedStepMS > 0 {
		cards = append(cards, card{Key: "Strategy's estimate", Value: fmtMS(p.EstimatedStepMS),
			Note: fmt.Sprintf("%+.1f%% against the simulator", 100*(p.EstimatedStepMS/p.PredictedStepMS-1))})
	}
	var most int64
	for _, d := range p.Devices {
		most = max(most, d.PeakMemoryBytes)
	}
	fits := card{Key: "Fits in memory", Value: "yes", Note: fmt.Sprintf("largest peak %s", fmtBytes(most)), Class: "ok"}
	if !p.Fits {
		fits.Value, fits.Class = "NO", "bad"
	}
	pg.Cards = append([]card{fits}, cards...)
}

func devicesTable(pg *page, p *plan.Plan, stageOf map[string]int) {
	for _, d := range p.Devices {
		r := deviceRow{Name: d.Name, Type: d.Type, Host: d.Host, Ops: fmt.Sprint(d.Ops), Busy: fmtNum3(d.BusyMS),
			Peak: fmtBytes(d.PeakMemoryBytes), Capacity: fmtBytes(d.MemoryBytes), Resident: fmtBytes(d.ResidentBytes)}
		s, ok := stageOf[d.Name]
		var member string
		if ok && d.Ops == 0 {
			member = tensorMember(p, s, d.Name)
		}
		switch {
		case member != "":
			r.Role = fmt.Sprintf("stage %d %s", s, member)
		case ok && d.Ops == 0:
			r.Role = fmt.Sprintf("stage %d replica", s)
		case ok:
			r.Role = fmt.Sprintf("stage %d", s)
		case d.Ops > 0:
			r.Role = "runs ops"
		default:
			r.Role = "unused"
		}
		r.Util = "-"
		if p.PredictedStepMS > 0 {
			r.Util = fmt.Sprintf("%.0f%%", 100*d.BusyMS/p.PredictedStepMS)
		}
		r.Used, r.UsedPct, r.UsedClass = "-", "0%", "ok"
		if d.MemoryBytes > 0 {
			f := float64(d.PeakMemoryBytes) / float64(d.MemoryBytes)
			r.Used = fmt.Sprintf("%.0f%%", 100*f)
			r.UsedPct = fmt.Sprintf("%.1f%%", 100*min(f, 1))
			switch {
			case f > 1:
				r.UsedClass, r.Over = "bad", true
			case f > 0.9:
				r.UsedClass = "warn"
			}
		}
		pg.Devices = append(pg.Devices, r)
	}
}

// mirrorDevices are the devices of a stage that run no op of their own:
// replicas of the stage's first replica.
func mirrorDevices(p *plan.Plan, stageOf map[string]int) []string {
	var out []string
	for _, d := range p.Devices {
		if _, ok := stageOf[d.Name]; ok && d.Ops == 0 {
			out = append(out, d.Name)
		}
	}
	return out
}

// rules lists the user's rules and what each bound.
func rules(pg *page, p *plan.Plan) {
	for _, r := range p.Rules {
		row := ruleRow{Rule: r.Rule, Source: r.Source, Ops: "-", Devices: "-", Effect: r.Effect}
		if !r.Hard {
			row.Rule += " (soft)"
		}
		if r.Ops > 0 {
			row.Ops = fmt.Sprint(r.Ops)
			ex := strings.Join(r.Examples, ", ")
			if r.Ops > len(r.Examples) {
				ex += ", …"
			}
			row.Examples = breakable(ex)
		}
		if len(r.Devices) > 0 {
			row.Devices = joinShort(r.Devices, 6)
		}
		if r.PenaltyMS > 0 {
			row.Effect += fmt.Sprintf(", +%s", fmtMS(r.PenaltyMS))
		}
		pg.Rules = append(pg.Rules, row)
	}
}

func stagesTable(pg *page, p *plan.Plan) {
	if len(p.Stages) == 0 {
		pg.StageNotes = append(pg.StageNotes, "The plan lists no stages.")
		return
	}
	var slowest float64
	for _, st := range p.Stages {
		slowest = max(slowest, st.TimeMS)
		if st.Modules() != "" {
			pg.ShowModules = true
		}
	}
	for _, st := range p.Stages {
		r := stageRow{Index: fmt.Sprint(st.Index), Type: st.DeviceType, Replicas: fmt.Sprint(st.Replicas), Ops: fmt.Sprint(len(st.Ops)),
			Time: fmtNum3(st.TimeMS), Compute: fmtNum3(st.ComputeMS), Comm: fmtNum3(st.CommMS), Sync: fmtNum3(st.SyncMS),
			Sends: fmtBytes(st.SendBytes), Peak: fmtBytes(st.PeakMemoryBytes),
			FirstOp: breakable(st.FirstOp), LastOp: breakable(st.LastOp), Module: breakable(st.Modules()),
			Bottleneck: len(p.Stages) > 1 && st.TimeMS == slowest}
		// As the plan's table writes it: 8 (zero3) (recompute) × tensor 2.
		if st.Sharding != "" {
			r.Replicas += " (" + st.Sharding + ")"
		}
		if st.Recompute {
			r.Replicas += " (recompute)"
		}
		if st.TensorParallel > 1 {
			r.Replicas += fmt.Sprintf(" × tensor %d", st.TensorParallel)
		}
		r.Devices = strings.Join(st.Devices, ", ")
		if len(st.Devices) > 2 {
			r.Devices = fmt.Sprintf("%s … %s (%d)", st.Devices[0], st.Devices[len(st.Devices)-1], len(st.Devices))
		}
		r.DevicesTitle = strings.Join(st.Devices, ", ")
		if len(st.ReplicaDevices) > 0 {
			reps := make([]string, len(st.ReplicaDevices))
			for i, rep := range st.ReplicaDevices {
				reps[i] = strings.Join(rep, "+")
			}
			r.DevicesTitle = "replicas: " + strings.Join(reps, " | ")
		}
		r.AllReduce = "-"
		if st.AllReduceBytes > 0 {
			r.AllReduce, r.AllReduceTime = fmtBytes(st.AllReduceBytes), "in "+fmtMS(st.AllReduceMS)
		}
		r.Alive = fmt.Sprint(st.AliveMicroBatches)
		r.Bar = stageBar(st, slowest)
		pg.Stages = append(pg.Stages, r)
	}
	pg.StageNotes = append(pg.StageNotes, "Times are per micro-batch: compute (the busiest device's), sends to later stages, and the stage's share of the step's all-reduce and optimizer update (sync). The first and last op are each stage's split points, the names to give torch.distributed.pipelining or DeepSpeed.")
	if len(p.Stages) > 1 {
		pg.StageNotes = append(pg.StageNotes, fmt.Sprintf("The slowest stage (highlighted) sets the pipeline's pace: %s per micro-batch.", fmtMS(p.BottleneckMS)))
	}
}

// stageBar is a stage's time per micro-batch split into compute, sends
// and sync, scaled to the slowest stage.
func stageBar(st plan.Stage, slowest float64) *svgChart {
	const w, h = 72.0, 12.0
	c := &svgChart{W: int(w), H: int(h), Class: "sbar", Label: fmt.Sprintf("stage %d time split", st.Index)}
	if slowest <= 0 {
		return c
	}
	c.rect(0, 0, w, h, "sbg", "")
	x := 0.0
	for _, part := range []struct {
		v     float64
		class string
		name  string
	}{{st.ComputeMS, "gf0", "compute"}, {st.CommMS, "gt", "sends"}, {st.SyncMS, "ga", "sync"}} {
		if part.v <= 0 {
			continue
		}
		pw := part.v / slowest * w
		c.rect(x, 0, pw, h, part.class, fmt.Sprintf("%s %s", part.name, fmtMS(part.v)))
		x += pw
	}
	return c
}

// candidate statuses.
const (
	candChosen = "chosen"
	candSlower = "slower"
	candNoFit  = "nofit"
	candFailed = "failed"
	candPruned = "pruned"
)

func candidateStatus(p *plan.Plan, c *plan.Candidate) string {
	switch {
	case c.Error != "" && c.PredictedStepMS <= 0:
		return candFailed
	case c.PredictedStepMS <= 0:
		return candPruned
	case c.Strategy == p.Strategy || "auto:"+c.Strategy == p.Strategy || c.Why == "" && c.Error == "":
		return candChosen
	case !c.Fits:
		return candNoFit
	}
	return candSlower
}

// candWhy says why a candidate lost, its error's first clause included.
func candWhy(c *plan.Candidate, status string) string {
	why := c.Why
	if status == candChosen {
		why = "chosen"
	}
	switch {
	case why == "" && c.Error != "":
		why = c.Error
	case why == "not applicable" && c.Error != "":
		why = c.Error
	case c.Error != "" && why != "does not fit" && !strings.Contains(why, c.Error):
		why += ": " + c.Error
	case why == "" && status == candNoFit:
		why = "does not fit"
	}
	return why
}

// The candidate chart's geometry.
const (
	candRowH  = 24
	candBarH  = 16
	candX0    = 250
	candX1    = 860
	candTop   = 26
	candBelow = 10
)

func candidates(pg *page, p *plan.Plan) {
	if len(p.Candidates) == 0 {
		pg.CandNote = fmt.Sprintf("Only %s was run: plan with the strategy auto to compare every strategy of the space and keep the fastest that fits.", p.Strategy)
		return
	}
	var most float64
	for _, c := range p.Candidates {
		most = max(most, c.PredictedStepMS)
	}
	most = max(most, p.LowerBoundMS)
	ch := &svgChart{W: chartW, H: candTop + candRowH*len(p.Candidates) + candBelow, Class: "cands",
		Label: fmt.Sprintf("Predicted step of the %d strategies tried", len(p.Candidates))}
	x := axis{lo: 0, hi: most * 1.02, from: candX0, to: candX1}
	vals, step := ticks(most*1.02, 8)
	bottom := float64(candTop + candRowH*len(p.Candidates))
	for _, v := range vals {
		ch.line(x.at(v), candTop-4, x.at(v), bottom, "grid")
		ch.text(x.at(v), candTop-8, "middle", "ax", tickLabel(v, step), "")
	}
	ch.text(candX0-10, candTop-8, "end", "ax", "predicted step (ms)", "")
	for i := range p.Candidates {
		c := &p.Candidates[i]
		status := candidateStatus(p, c)
		why := candWhy(c, status)
		row := candRow{Strategy: c.Strategy, Family: c.Family, Shape: c.Shape, Step: "-", Throughput: "-", Peak: "-", Fits: "-",
			Why: why, Status: status}
		if row.Shape == "" {
			row.Shape = "-"
		}
		if c.PredictedStepMS > 0 {
			row.Step, row.Peak = fmtNum3(c.PredictedStepMS), fmtBytes(c.PeakMemoryBytes)
			row.Fits = "yes"
			if !c.Fits {
				row.Fits = "no"
			}
			if c.ThroughputSamplesPerS > 0 {
				row.Throughput = fmt.Sprintf("%.1f", c.ThroughputSamplesPerS)
			}
		}
		pg.CandRows = append(pg.CandRows, row)
		y := float64(candTop + candRowH*i)
		labelClass := "cl"
		if status == candChosen {
			labelClass = "clc"
			ch.Bands = append(ch.Bands, svgRect{X: "4", Y: num(y), W: num(chartW - 8), H: num(candRowH), Class: "crow"})
		}
		ch.text(candX0-10, y+candRowH/2+4, "end", labelClass, clip(c.Strategy, 30), c.Strategy+" ("+c.Family+")")
		ch.text(12, y+candRowH/2+4, "start", "cf", c.Family, "")
		by := y + (candRowH-candBarH)/2
		title := fmt.Sprintf("%s (%s)\n%s", c.Strategy, c.Family, why)
		switch status {
		case candFailed, candPruned:
			ch.text(candX0+6, y+candRowH/2+4, "start", "cwhy", clip(why, 150), why)
			continue
		}
		if c.Shape != "" {
			title += "\n" + c.Shape
		}
		title += fmt.Sprintf("\nstep %s, peak memory %s", fmtMS(c.PredictedStepMS), fmtBytes(c.PeakMemoryBytes))
		class := map[string]string{candChosen: "cbc", candSlower: "cb", candNoFit: "cbn"}[status]
		bx1 := x.at(c.PredictedStepMS)
		ch.rect(candX0, by, bx1-candX0, candBarH, class, title)
		label := fmtMS(c.PredictedStepMS) + " · " + why
		if status == candNoFit {
			label = fmtMS(c.PredictedStepMS) + " · does not fit: peak " + fmtBytes(c.PeakMemoryBytes)
		}
		ch.text(bx1+6, y+candRowH/2+4, "start", "cv"+status, clip(label, 70), "")
	}
	if p.LowerBoundMS > 0 {
		lx := x.at(p.LowerBoundMS)
		ch.line(lx, candTop-2, lx, bottom, "lb")
		kind := ""
		if p.LowerBoundKind != "" {
			kind = " (" + p.LowerBoundKind + ")"
		}
		ch.Texts = append(ch.Texts, svgText{X: num(lx + 4), Y: num(bottom + 9), Class: "lbt", Anchor: "start",
			Text: "lower bound " + shortMS(p.LowerBoundMS) + kind})
		ch.H += 4
	}
	pg.CandChart = ch
	pg.CandNote = "Best first. Failed and pruned strategies have no bar: pruned ones were proved by a bound unable to beat the plan kept, so they were not simulated."
}

var (
	svgStart   = regexp.MustCompile(`<svg\b`)
	xmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	svgSize    = regexp.MustCompile(`\s(width|height)="([0-9.]+)(pt|px)?"`)
)

// graph renders the device view with Graphviz for inlining.
func graph(ctx context.Context, pg *page, p *plan.Plan, o Options) {
	if o.NoGraphviz {
		pg.GraphNote = "The device view was left out of this report."
		return
	}
	var dot bytes.Buffer
	vo := view.DefaultOptions()
	vo.Detail = view.Devices
	if err := view.WriteDOT(&dot, p, nil, vo); err != nil {
		pg.GraphNote = "The device view could not be drawn: " + err.Error()
		return
	}
	svg, err := view.Render(ctx, dot.Bytes(), "svg", o.RenderTimeout)
	switch {
	case errors.Is(err, view.ErrNoGraphviz):
		pg.GraphNote = "Graphviz's dot is not installed where this report was written, so the device view is missing (Debian and Ubuntu: apt install graphviz). A plan can also be written as a Graphviz view (DOT) and rendered elsewhere."
		return
	case err != nil:
		pg.GraphNote = "The device view could not be rendered: " + err.Error()
		return
	}
	inline, err := inlineSVG(svg)
	if err != nil {
		pg.GraphNote = "The device view could not be rendered: " + err.Error()
		return
	}
	pg.Graph = template.HTML(inline)
}

// inlineSVG turns Graphviz's SVG file into an element to inline: the XML
// prolog, DOCTYPE and comments go, and the fixed size becomes a maximum
// so the picture shrinks with the page.
func inlineSVG(svg []byte) (string, error) {
	loc := svgStart.FindIndex(svg)
	if loc == nil {
		return "", errors.New("Graphviz wrote no <svg> element")
	}
	s := xmlComment.ReplaceAllString(string(svg[loc[0]:]), "")
	tagEnd := strings.IndexByte(s, '>')
	if tagEnd < 0 {
		return "", errors.New("Graphviz wrote a truncated <svg> element")
	}
	tag, rest := s[:tagEnd], s[tagEnd:]
	width := ""
	for _, m := range svgSize.FindAllStringSubmatch(tag, -1) {
		if m[1] == "width" {
			width = m[2] + "pt"
			if m[3] == "px" {
				width = m[2] + "px"
			}
		}
	}
	tag = svgSize.ReplaceAllString(tag, "")
	style := "width:100%;height:auto"
	if width != "" {
		style += ";max-width:" + width
	}
	tag += ` class="dotview" style="` + style + `"`
	return strings.TrimSpace(tag + rest), nil
}

// breakable escapes an op name and lets it wrap after each "/" of its
// module path, so a narrow column breaks names where a person would.
func breakable(name string) template.HTML {
	return template.HTML(strings.ReplaceAll(html.EscapeString(name), "/", "/<wbr>"))
}

func baseName(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		path = path[i+1:]
	}
	return path
}

func modeName(mode string) string {
	switch mode {
	case "train":
		return "training step"
	case "infer":
		return "inference"
	}
	return mode
}

// tensorMember is where a device sits in a tensor-parallel stage
// ("group 2, member 1": the second device of the third replica's
// group), or "" when the stage is not tensor-parallel.
func tensorMember(p *plan.Plan, s int, name string) string {
	st := p.Stage(s)
	if st == nil || st.TensorParallel < 2 {
		return ""
	}
	for k, group := range st.ReplicaDevices {
		for i, d := range group {
			if d == name {
				return fmt.Sprintf("group %d, member %d", k, i)
			}
		}
	}
	return ""
}
