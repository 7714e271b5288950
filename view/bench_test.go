package view_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/view"
)

var benchModels = []struct {
	name string
	dims map[string]int64
}{
	{"resnet50", nil}, {"inception_v3", nil}, {"vgg16", nil}, {"mobilenet_v2", nil},
	{"bert_base", map[string]int64{"batch": 16}}, {"gpt2_small", map[string]int64{"batch": 8}},
	{"transformer", nil}, {"gnmt", nil}, {"gpt2_xl", map[string]int64{"batch": 4}},
}

var (
	svgSize   = regexp.MustCompile(`<svg width="(\d+)pt" height="(\d+)pt"`)
	nodeLine  = regexp.MustCompile(`(?m)^\s+"[^"]+" \[label=`)
	edgeLines = regexp.MustCompile(`(?m)^\s+"[^"]+" -> `)
)

// BenchmarkViews renders the device, stage and module views of every
// shared model's training step on every bundled cluster with Graphviz's
// dot, reporting each view's nodes, edges and size in pixels (96 dpi),
// and the trace's size; it prints the table docs/views.md quotes, slowest
// render first.
//
//	go test -run '^$' -bench Views -benchtime 1x ./view/
func BenchmarkViews(b *testing.B) {
	if _, err := exec.LookPath("dot"); err != nil {
		b.Skip("graphviz not installed")
	}
	ctx := context.Background()
	type row struct {
		name          string
		nodes, edges  int
		width, height int
		render        time.Duration
	}
	var rows []row
	for _, m := range benchModels {
		for _, cl := range []string{"4xV100", "8xA100-2host", "hetero"} {
			res, err := pipeline.Run(ctx, pipeline.Options{
				ModelPath:   filepath.Join("..", "testdata", "models", m.name+".onnx"),
				ClusterPath: filepath.Join("..", "testdata", "clusters", cl+".yaml"),
				Import:      pipeline.ImportOptions{Dims: m.dims},
			})
			if err != nil {
				continue // does not fit this cluster
			}
			var trace bytes.Buffer
			if err := view.WriteTrace(&trace, res.Plan); err != nil {
				b.Fatal(err)
			}
			for _, detail := range []view.Detail{view.Devices, view.Stages, view.Modules} {
				name := m.name + "/" + cl + "/" + string(detail)
				b.Run(name, func(b *testing.B) {
					o := view.DefaultOptions()
					o.Detail = detail
					var dot bytes.Buffer
					if err := view.WriteDOT(&dot, res.Plan, res.Graph, o); err != nil {
						b.Fatal(err)
					}
					var svg []byte
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if svg, err = view.Render(ctx, dot.Bytes(), "svg", 0); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					r := row{name: name, nodes: len(nodeLine.FindAll(dot.Bytes(), -1)), edges: len(edgeLines.FindAll(dot.Bytes(), -1)),
						render: b.Elapsed() / time.Duration(b.N)}
					if s := svgSize.FindSubmatch(svg); s != nil {
						w, _ := strconv.Atoi(string(s[1]))
						h, _ := strconv.Atoi(string(s[2]))
						r.width, r.height = w*96/72, h*96/72
					}
					b.ReportMetric(float64(r.nodes), "nodes")
					b.ReportMetric(float64(r.edges), "edges")
					b.ReportMetric(float64(r.width*r.height)/1e6, "Mpixels")
					if detail == view.Modules {
						b.ReportMetric(float64(trace.Len())/(1<<20), "trace-MiB")
					}
					rows = append(rows, r)
				})
			}
		}
	}
	slices.SortStableFunc(rows, func(a, b row) int { return int(b.render - a.render) })
	var t strings.Builder
	t.WriteString("| view | nodes | edges | pixels | dot -Tsvg |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&t, "| %s | %d | %d | %d x %d | %.0f ms |\n", r.name, r.nodes, r.edges, r.width, r.height, r.render.Seconds()*1e3)
	}
	b.Log("\n" + t.String())
}
