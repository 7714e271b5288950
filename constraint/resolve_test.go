package constraint

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// twoBlocks is in -> /a/x -> /a/y -> /b/x -> /b/y, each block with a
// 100-byte parameter, and a training-like grad op per block colocated
// with its forward op.
func twoBlocks() *graph.Graph {
	g := graphtest.New("two").Input("in", 10).Param("wa", 100).Param("wb", 100).
		Op("/a/x", 10, 10, "in", "wa").Op("/a/y", 10, 10, "/a/x").
		Op("/b/x", 10, 10, "/a/y", "wb").Op("/b/y", 10, 10, "/b/x").
		Op("/b/x/grad", 10, 10, "/b/y").Op("/a/x/grad", 10, 10, "/b/x/grad").Output("/a/x/grad").G
	g.Ops[4].Phase, g.Ops[5].Phase = graph.Backward, graph.Backward
	g.Ops[4].Colocate, g.Ops[2].Colocate = "~b", "~b"
	g.Ops[5].Colocate, g.Ops[0].Colocate = "~a", "~a"
	return g
}

// fourDevices is d0, d1 (1 GFLOP/s) and d2, d3 (2 GFLOP/s), 1000 bytes each.
func fourDevices() *cluster.Cluster {
	return graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 1e9, Memory: 1000}, graphtest.Device{FLOPS: 1e9, Memory: 1000},
		graphtest.Device{FLOPS: 2e9, Memory: 1000}, graphtest.Device{FLOPS: 2e9, Memory: 1000})
}

func opsOf(by, p string) []Selector { return []Selector{{By: by, Pattern: p}} }

func devT(name string) Target { return Target{By: TargetDevice, Name: name} }

// allowedNames lists the devices op may use.
func allowedNames(r *Resolved, op graph.OpID) []string {
	var out []string
	for d := range r.Cluster.Devices {
		if r.Allowed == nil || r.Allowed.Has(op, d) {
			out = append(out, r.Cluster.Devices[d].Name)
		}
	}
	return out
}

func TestResolvePinAvoid(t *testing.T) {
	g := twoBlocks()
	set := &Set{Rules: []Rule{
		{Kind: Pin, Ops: opsOf(SelectModule, "/a"), Target: Target{By: TargetType, Name: "dev2e+09"}},
		{Kind: Avoid, Ops: opsOf(SelectName, "/a/x"), Target: devT("d3")},
		{Kind: Avoid, Ops: opsOf(SelectPhase, "backward"), Target: devT("d0")},
	}}
	r, err := Resolve(set, g, fourDevices())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"/a/x": {"d2"}, "/a/y": {"d2", "d3"}, "/b/x": {"d0", "d1", "d2", "d3"},
		"/b/x/grad": {"d1", "d2", "d3"}, "/a/x/grad": {"d2", "d3"},
	}
	for i := range g.Ops {
		if w, ok := want[g.Ops[i].Name]; ok && !slices.Equal(allowedNames(r, graph.OpID(i)), w) {
			t.Errorf("%s may use %v, want %v", g.Ops[i].Name, allowedNames(r, graph.OpID(i)), w)
		}
	}
	if got := len(r.Bindings[0].Ops); got != 3 { // /a/x, /a/y, /a/x/grad
		t.Errorf("module:/a binds %d ops, want 3", got)
	}
	keys := r.FusionKeys(nil)
	if keys[0] == keys[1] || keys[2] != keys[3] {
		t.Errorf("fusion keys %v: /a/x and /a/y are bound differently, /b/x and /b/y alike", keys)
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name     string
		rules    []Rule
		conflict bool
		want     string
	}{
		{"selects nothing", []Rule{{Kind: Pin, Ops: opsOf(SelectModule, "/c"), Target: devT("d0")}}, false, "selects no op"},
		{"bad regex", []Rule{{Kind: Pin, Ops: opsOf(SelectRegex, "(("), Target: devT("d0")}}, false, "malformed regular expression"},
		{"unknown device", []Rule{{Kind: Pin, Ops: opsOf(SelectName, "/a/x"), Target: devT("gpu9")}}, false, "names no device"},
		{"unknown host", []Rule{{Kind: Avoid, Ops: opsOf(SelectName, "/a/x"), Target: Target{By: TargetHost, Name: "h9"}}}, false, "host:h0"},
		{"pin and avoid", []Rule{
			{Kind: Pin, Ops: opsOf(SelectName, "/a/x"), Target: devT("d0")},
			{Kind: Avoid, Ops: opsOf(SelectName, "/a/*"), Target: devT("d0")},
		}, true, `leave op "/a/x" no device`},
		{"colocated apart", []Rule{
			{Kind: Pin, Ops: opsOf(SelectName, "/a/x"), Target: devT("d0")},
			{Kind: Pin, Ops: opsOf(SelectName, "/a/x/grad"), Target: devT("d1")},
		}, true, "must share a device"},
		{"colocate rule apart", []Rule{
			{Kind: Colocate, Ops: []Selector{{By: SelectName, Pattern: "/a/y"}, {By: SelectName, Pattern: "/b/y"}}},
			{Kind: Pin, Ops: opsOf(SelectName, "/a/y"), Target: devT("d0")},
			{Kind: Pin, Ops: opsOf(SelectName, "/b/y"), Target: devT("d1")},
		}, true, "colocate rule"},
		{"separate overlap", []Rule{{Kind: Separate, Groups: [][]Selector{opsOf(SelectModule, "/a"), opsOf(SelectName, "/a/x")}}}, true, "group 1 and group 2"},
		{"separate colocated", []Rule{{Kind: Separate, Groups: [][]Selector{opsOf(SelectName, "/a/x"), opsOf(SelectName, "/a/x/grad")}}}, true, "different groups"},
		{"reserve all", []Rule{{Kind: Reserve, Target: Target{By: TargetAll}, Fraction: 1}}, true, "reserves"},
		{"pin outside limit", []Rule{
			{Kind: Pin, Ops: opsOf(SelectName, "/a/x"), Target: devT("d0")},
			{Kind: Limit, MaxDevices: 2},
		}, true, "limit rules leave out"},
		{"limit to nothing", []Rule{{Kind: Limit, Only: []Target{devT("d0")}}, {Kind: Limit, Only: []Target{devT("d1")}}}, true, "no device is in every"},
		{"params over memory", []Rule{
			{Kind: Pin, Ops: opsOf(SelectName, "/?/x"), Target: devT("d0")},
			{Kind: Reserve, Target: devT("d0"), Bytes: 850},
		}, true, "reserved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(&Set{Rules: tc.rules}, twoBlocks(), fourDevices())
			if err == nil {
				t.Fatal("no error")
			}
			var conflict *ConflictError
			var input *InputError
			if tc.conflict && !errors.As(err, &conflict) || !tc.conflict && !errors.As(err, &input) {
				t.Errorf("error %T, want conflict %v: %v", err, tc.conflict, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestResolveClusterRules(t *testing.T) {
	set := &Set{Rules: []Rule{
		{Kind: Limit, MaxDevices: 3},
		{Kind: Reserve, Target: Target{By: TargetAll}, Fraction: 0.25},
		{Kind: Reserve, Target: devT("d2"), Bytes: 500},
	}}
	r, err := Resolve(set, twoBlocks(), fourDevices())
	if err != nil {
		t.Fatal(err)
	}
	// The two fast devices, then d0 by cluster order.
	var names []string
	var mem []int64
	for _, d := range r.Cluster.Devices {
		names, mem = append(names, d.Name), append(mem, d.Memory)
	}
	if !slices.Equal(names, []string{"d0", "d2", "d3"}) || !slices.Equal(mem, []int64{750, 500, 750}) {
		t.Errorf("devices %v with memory %v, want [d0 d2 d3] with [750 500 750]", names, mem)
	}
	if !slices.Equal(r.Removed, []string{"d1"}) || !slices.Equal(r.Reserved, []int64{250, 500, 250}) {
		t.Errorf("removed %v, reserved %v", r.Removed, r.Reserved)
	}
}

func TestApplyColocation(t *testing.T) {
	g := twoBlocks()
	r, err := Resolve(&Set{Rules: []Rule{{Kind: Colocate, Ops: []Selector{{By: SelectName, Pattern: "/a/x"}, {By: SelectName, Pattern: "/b/y"}}}}}, g, fourDevices())
	if err != nil {
		t.Fatal(err)
	}
	r.ApplyColocation()
	// /a/x carries its gradient's key along.
	key := g.Ops[0].Colocate
	for _, i := range []int{0, 3, 5} {
		if g.Ops[i].Colocate != key {
			t.Errorf("%s has key %q, want %q", g.Ops[i].Name, g.Ops[i].Colocate, key)
		}
	}
	if g.Ops[1].Colocate == key || g.Ops[2].Colocate == key {
		t.Errorf("ops outside the rule joined it")
	}
}

func TestCutKeys(t *testing.T) {
	g := graphtest.New("blocks").Input("in", 1).
		Op("/emb/Gather", 1, 1, "in").Op("Mask", 1, 1, "/emb/Gather").
		Op("/blocks/blocks.0/attn/MatMul", 1, 1, "Mask").Op("/blocks/blocks.0/Add", 1, 1, "/blocks/blocks.0/attn/MatMul").
		Op("Between", 1, 1, "/blocks/blocks.0/Add").
		Op("/blocks/blocks.1/attn/MatMul", 1, 1, "Between").Op("/ln/Norm", 1, 1, "/blocks/blocks.1/attn/MatMul").G
	r, err := Resolve(&Set{Rules: []Rule{{Kind: Cut, CutAt: "/blocks/blocks.*"}}}, g, fourDevices())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"(before the first cut)", "(before the first cut)", "/blocks/blocks.0/", "/blocks/blocks.0/", "/blocks/blocks.0/", "/blocks/blocks.1/", "/blocks/blocks.1/"}
	if got := r.CutKeys(nil); !slices.Equal(got, want) { // no base needed
		t.Errorf("cut at keys %q, want %q", got, want)
	}
	r, err = Resolve(&Set{Rules: []Rule{{Kind: Cut, NotInside: "/blocks/blocks.0"}}}, g, fourDevices())
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"/emb/", "", "/blocks/blocks.0/attn/", "/blocks/blocks.0/", "", "/blocks/blocks.1/attn/", "/ln/"}
	want = []string{"/emb/", "", "(inside)/blocks/blocks.0/", "(inside)/blocks/blocks.0/", "", "/blocks/blocks.1/attn/", "/ln/"}
	if got := r.CutKeys(func() []string { return base }); !slices.Equal(got, want) {
		t.Errorf("not inside keys %q, want %q", got, want)
	}
}

func TestCheck(t *testing.T) {
	g := twoBlocks()
	set := &Set{Rules: []Rule{
		{Kind: Pin, Ops: opsOf(SelectName, "/a/x"), Target: Target{By: TargetType, Name: "dev1e+09"}},
		{Kind: Separate, Groups: [][]Selector{opsOf(SelectModule, "/a"), opsOf(SelectName, "/b/y")}},
		{Kind: Colocate, Ops: []Selector{{By: SelectName, Pattern: "/a/y"}, {By: SelectName, Pattern: "/b/x"}}},
		{Kind: Prefer, Ops: opsOf(SelectPhase, "backward"), Target: devT("d3"), Weight: 2},
	}}
	r, err := Resolve(set, g, fourDevices())
	if err != nil {
		t.Fatal(err)
	}
	c := r.Checker(nil, nil)
	place := func(devs ...int) *sim.Plan { return &sim.Plan{Placement: sim.Placement{Device: devs}} }
	//            /a/x /a/y /b/x /b/y gb ga
	good := place(0, 1, 1, 2, 3, 0)
	if err := c.Check(good); err != nil {
		t.Errorf("good placement: %v", err)
	}
	if p := c.Penalty(good); p != 0.002 { // /a/x/grad is off d3
		t.Errorf("penalty %g s, want 0.002", p)
	}
	for name, tc := range map[string]struct {
		pl   *sim.Plan
		want string
	}{
		"pin":      {place(2, 1, 1, 3, 3, 2), `"/a/x" runs on d2`},
		"separate": {place(0, 2, 2, 2, 3, 0), "both run on d2"},
		"colocate": {place(0, 1, 0, 2, 3, 0), `runs on d1, op "/b/x" on d0`},
		// Data parallel over d0 and d2: /a/x also runs on d2.
		"replicas": {&sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 0, 0, 0, 0}}, Stages: []sim.Stage{{Replicas: [][]int{{0}, {2}}}}}, "runs on d2"},
	} {
		err := c.Check(tc.pl)
		var v *Violation
		if !errors.As(err, &v) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a violation saying %q", name, err, tc.want)
		}
	}
	// A cut rule: stages must keep each piece whole.
	r2, err := Resolve(&Set{Rules: []Rule{{Kind: Cut, NotInside: "/b"}}}, g, fourDevices())
	if err != nil {
		t.Fatal(err)
	}
	cut := r2.CutKeys(func() []string { return make([]string, len(g.Ops)) })
	split := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 1, 2, 2, 0}}, OpStage: []int{0, 0, 1, 2, 2, 0},
		Stages: []sim.Stage{{Replicas: [][]int{{0}}}, {Replicas: [][]int{{1}}}, {Replicas: [][]int{{2}}}}}
	if err := r2.Checker(nil, cut).Check(split); err == nil || !strings.Contains(err.Error(), "same piece") {
		t.Errorf("a stage boundary inside /b/: %v", err)
	}
}
