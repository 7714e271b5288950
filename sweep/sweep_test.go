package sweep

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
)

const (
	gptMini = "../testdata/models/heldout/gpt_mini.onnx"
	resnet  = "../testdata/models/resnet50.onnx"
)

func TestTemplateLayouts(t *testing.T) {
	def := DefaultTemplate()
	priced, err := LoadTemplate("testdata/priced.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		tmpl         *Template
		typ          string
		count        int
		hosts        int
		direct       int // direct device pairs
		directGBs    float64
		intraGBs     float64
		pricePerHour float64
	}{
		{"A100 default: one host, NVSwitch", def, "A100-80GB", 8, 1, 28, 300, 32, 0},
		{"A100 default: 12 over two hosts", def, "A100-80GB", 12, 2, 28 + 6, 300, 32, 0},
		{"V100 default: one NVLink brick a pair", def, "V100-16GB", 4, 1, 6, 25, 16, 0},
		{"T4 default: PCIe only", def, "T4", 8, 1, 0, 0, 16, 0},
		{"H100 default", def, "H100-80GB", 2, 1, 1, 450, 64, 0},
		{"template: four a host, priced", priced, "A100-80GB", 8, 2, 12, 100, 32, 8 * 4.1},
		{"template: T4 priced, no NVLink", priced, "T4", 5, 2, 0, 0, 32, 5 * 0.35},
		{"template: an unnamed type takes the defaults", priced, "V100-16GB", 1, 1, 0, 0, 32, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.tmpl.Cluster(tc.typ, tc.count, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := g.Cluster
			if len(c.Devices) != tc.count || len(c.Hosts) != tc.hosts || g.Hosts != tc.hosts {
				t.Fatalf("%s: %d devices on %d hosts, want %d on %d", g.Name, len(c.Devices), len(c.Hosts), tc.count, tc.hosts)
			}
			if len(c.Direct) != tc.direct {
				t.Errorf("%s: %d direct pairs, want %d", g.Name, len(c.Direct), tc.direct)
			}
			for _, l := range c.Direct {
				if l.Bandwidth != tc.directGBs*1e9 {
					t.Errorf("%s: direct link at %g B/s, want %g GB/s", g.Name, l.Bandwidth, tc.directGBs)
				}
			}
			if got := c.Hosts[0].Intra.Bandwidth; got != tc.intraGBs*1e9 {
				t.Errorf("%s: intra link at %g B/s, want %g GB/s", g.Name, got, tc.intraGBs)
			}
			if g.PricePerHour != tc.pricePerHour {
				t.Errorf("%s: price %g, want %g", g.Name, g.PricePerHour, tc.pricePerHour)
			}
			// Devices fill the hosts in order: host k holds devices
			// 8k, 8k+1, ... of its layout's per_host.
			per := tc.tmpl.Layout(tc.typ).PerHost
			for i, d := range c.Devices {
				if d.Host != i/per || d.Type.Name != tc.typ {
					t.Fatalf("%s: device %s on host %d of type %s", g.Name, d.Name, d.Host, d.Type.Name)
				}
			}
		})
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "per_hots: 4\n", `t.yaml:1: unknown field "per_hots"`},
		{"per_host zero", "per_host: 0\n", "t.yaml:1: per_host: want a whole number of devices per host from 1 to 1024"},
		{"per_host text", "per_host: many\n", "per_host: want a whole number"},
		{"unknown link preset", "intra: {preset: pcie9}\n", `intra.preset: unknown link preset "pcie9"`},
		{"bare unknown preset", "network: fast\n", `network: unknown link preset "fast"`},
		{"link without bandwidth", "intra: {latency: 2us}\n", `intra: missing required field "bandwidth"`},
		{"bad bandwidth", "intra: {bandwidth: 12GBps}\n", "intra.bandwidth:"},
		{"bad latency", "intra: {bandwidth: 12GB/s, latency: soon}\n", "intra.latency:"},
		{"types not a list", "types: {A100-80GB: {}}\n", "types: expected a list"},
		{"type without a name", "types:\n  - {per_host: 2}\n", `types[0].name: missing required field "name"`},
		{"type twice", "types:\n  - {name: T4}\n  - {name: t4}\n", `t.yaml:3: types[1].name: type "t4" is laid out twice (first at line 2)`},
		{"negative price", "types:\n  - {name: T4, price_per_hour: -1}\n", "types[0].price_per_hour: want a positive number of dollars"},
		{"empty", "", "t.yaml: file is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(tc.yaml), "t.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	custom, err := LoadTypes("testdata/small-types.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"unknown type", Options{Model: gptMini, Types: []string{"A100-80G"}, Counts: []int{1}}, `unknown device type "A100-80G"; use a preset`},
		{"unknown type with a types file", Options{Model: gptMini, Types: []string{"T5"}, Counts: []int{1}, Custom: custom}, "or a type testdata/small-types.yaml declares (T4-256MiB)"},
		{"count 0", Options{Model: gptMini, Types: []string{"T4"}, Counts: []int{2, 0}}, "device count 0: want 1 or more"},
		{"count twice", Options{Model: gptMini, Types: []string{"T4"}, Counts: []int{2, 2}}, "device count 2 is given twice"},
		{"type twice", Options{Model: gptMini, Types: []string{"T4", "t4"}, Counts: []int{2}}, "device type T4 is given twice"},
		{"no types", Options{Model: gptMini, Counts: []int{2}}, "a sweep needs device types and counts"},
		{"batch 0", Options{Model: gptMini, Types: []string{"T4"}, Counts: []int{1}, Batches: []int64{0}}, "batch size 0: want 1 or more"},
		{"a batch the model fixes", Options{Model: resnet, Types: []string{"T4"}, Counts: []int{1}, Batches: []int64{8}}, "batch size 8 binds no input: the model's batch is fixed at 32"},
		{"unbound batch", Options{Model: gptMini, Types: []string{"T4"}, Counts: []int{1}}, `symbolic dimension "batch"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.opts)
			var in *pipeline.InputError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !asInput(err, &in) {
				t.Fatalf("got %v, want an input error containing %q", err, tc.want)
			}
		})
	}
}

func asInput(err error, in **pipeline.InputError) bool {
	e, ok := err.(*pipeline.InputError)
	*in = e
	return ok
}

// TestPointsMatchPlan checks that every point's figures are those of a
// plan made as opplace plan makes one: the model read from its file, the
// point's generated cluster read from a cluster file.
func TestPointsMatchPlan(t *testing.T) {
	custom, err := LoadTypes("testdata/small-types.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := LoadTemplate("testdata/priced.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []Options{
		// A point that does not fit (T4-256MiB x1), two hosts (x5), prices.
		{Model: resnet, Types: []string{"T4-256MiB", "A100-80GB"}, Counts: []int{1, 5}},
		// Two batch sizes, each imported once for its points.
		{Model: gptMini, Types: []string{"A100-80GB"}, Counts: []int{1, 2}, Batches: []int64{2, 4}},
	} {
		t.Run(filepath.Base(tc.Model), func(t *testing.T) {
			tc.Template, tc.Custom = tmpl, custom
			res, err := Run(context.Background(), tc)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Points) != len(tc.Types)*len(tc.Counts)*max(1, len(tc.Batches)) {
				t.Fatalf("%d points for %v", len(res.Points), tc)
			}
			checkAgainstPlans(t, res, tmpl, custom)
		})
	}
}

func checkAgainstPlans(t *testing.T, res *Result, tmpl *Template, custom *Types) {
	dir := t.TempDir()
	for _, p := range res.Points {
		g, err := tmpl.Cluster(p.Type, p.Devices, custom)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, g.Name+".yaml")
		if err := os.WriteFile(path, g.YAML, 0o644); err != nil {
			t.Fatal(err)
		}
		name := p.Cluster + " batch " + strconv.FormatInt(p.Batch, 10)
		want, err := pipeline.Run(context.Background(), pipeline.Options{ModelPath: res.Model, ClusterPath: path, Import: pipeline.ImportOptions{Batch: p.Batch}})
		if err != nil {
			if p.Fits || p.WhyNot != err.Error() || p.ThroughputSamplesPerS != 0 {
				t.Errorf("%s: plan fails with %v; the sweep says fits %v, %q", name, err, p.Fits, p.WhyNot)
			}
			continue
		}
		w := want.Plan
		var peak int64
		for _, d := range w.Devices {
			peak = max(peak, d.PeakMemoryBytes)
		}
		if !p.Fits || p.ThroughputSamplesPerS != w.ThroughputSamplesPerS || p.StepMS != w.PredictedStepMS || p.Strategy != w.Strategy ||
			p.Family != w.Family || p.PeakMemoryBytes != peak || p.StepsPerS != 1000/w.PredictedStepMS || p.Hosts != len(want.Cluster.Hosts) {
			t.Errorf("%s: sweep %+v\nplan %s %s: %v samples/s, %v ms, peak %d", name, p, w.Strategy, w.Family, w.ThroughputSamplesPerS, w.PredictedStepMS, peak)
		}
		if p.Type == "A100-80GB" && p.SamplesPerDollar != p.ThroughputSamplesPerS*3600/(4.1*float64(p.Devices)) {
			t.Errorf("%s: %v samples per dollar", name, p.SamplesPerDollar)
		}
	}
}

// TestOutputs checks the CSV, JSON and Gavel forms of one result.
func TestOutputs(t *testing.T) {
	custom, err := LoadTypes("testdata/small-types.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Model: resnet, Types: []string{"T4-256MiB", "T4"}, Counts: []int{1, 2}, Custom: custom}
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	unfit := 0
	for _, p := range res.Points {
		if !p.Fits {
			unfit++
		}
	}
	if unfit == 0 || unfit == len(res.Points) {
		t.Fatalf("%d of %d points fit: the test wants both kinds", len(res.Points)-unfit, len(res.Points))
	}
	t.Run("csv", func(t *testing.T) {
		var b bytes.Buffer
		if err := WriteCSV(&b, res); err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(&b).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1+len(res.Points) || strings.Join(rows[0], ",") != strings.Join(csvHeader, ",") {
			t.Fatalf("%d rows, header %v", len(rows), rows[0])
		}
		for i, p := range res.Points {
			row := rows[i+1]
			if row[0] != p.Type || row[1] != strconv.Itoa(p.Devices) || row[6] != strconv.FormatFloat(p.ThroughputSamplesPerS, 'g', -1, 64) || row[17] != p.WhyNot {
				t.Errorf("row %d %v for %+v", i+1, row, p)
			}
		}
	})
	t.Run("json", func(t *testing.T) {
		var a, b bytes.Buffer
		if err := WriteJSON(&a, res); err != nil {
			t.Fatal(err)
		}
		again, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&b, again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatal("two sweeps of the same inputs wrote different JSON")
		}
		var got struct {
			Version int     `json:"version"`
			Model   string  `json:"model"`
			Points  []Point `json:"points"`
		}
		if err := json.Unmarshal(a.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Version != 1 || got.Model != resnet || len(got.Points) != len(res.Points) {
			t.Fatalf("read back %+v", got)
		}
		for i, p := range got.Points {
			want := res.Points[i]
			want.Reason, want.SolveMS = "", 0
			if p != want {
				t.Errorf("point %d read back as %+v, want %+v", i, p, want)
			}
		}
	})
	t.Run("gavel", func(t *testing.T) {
		var b bytes.Buffer
		if err := WriteGavel(&b, res, ""); err != nil {
			t.Fatal(err)
		}
		var g map[string]map[string]map[string]float64
		if err := json.Unmarshal(b.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		// Gavel's parse_job_type_tuple.
		key := regexp.MustCompile(`^\('(.*)', (\d+)\)$`)
		n := 0
		for worker, jobs := range g {
			for k, v := range jobs {
				m := key.FindStringSubmatch(k)
				if m == nil || m[1] != "resnet50" || len(v) != 1 {
					t.Fatalf("%s: key %q, value %v", worker, k, v)
				}
				devices, _ := strconv.Atoi(m[2])
				p, ok := find(res, worker, devices, 0)
				if !ok || v["null"] != p.StepsPerS || (p.Fits != (v["null"] > 0)) {
					t.Errorf("%s %s: %v steps/s, point %+v", worker, k, v, p)
				}
				n++
			}
		}
		if n != len(res.Points) {
			t.Errorf("%d entries for %d points", n, len(res.Points))
		}
	})
	t.Run("svg", func(t *testing.T) {
		var b bytes.Buffer
		if err := WriteSVG(&b, res); err != nil {
			t.Fatal(err)
		}
		s := b.String()
		// A dot for each point that fits, a cross for each that does not,
		// and a line for T4, whose two points fit; the legend has a dot
		// per type and a cross.
		if !strings.HasPrefix(s, "<svg") || strings.Count(s, "<polyline") != 1 || strings.Count(s, "<circle") != len(res.Points)-unfit+2 ||
			strings.Count(s, "<path") != unfit+1 || !strings.Contains(s, "T4-256MiB x1: the model does not fit") {
			t.Fatalf("SVG:\n%s", s)
		}
	})
}
