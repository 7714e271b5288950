package constraint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// example is the file format's every section, as docs/constraints.md
// shows it.
const example = `pin:
  - ops: module:/transformer/wte      # one selector, or a list of selectors (union)
    to: gpu0
avoid:
  - ops: phase:backward
    on: type:T4
colocate:
  - ops: [module:/tower_a/, "name:Loss*"]
separate:
  - [module:/tower_a/, module:/tower_b/]
  - [[module:/a/, re:^b.*], type:MatMul, [phase:update]]
reserve:
  - on: "*"
    amount: 10%
  - on: host:h1
    amount: 2GiB
  - on: gpu1
    amount: 1.5GB
  - on: gpu2
    amount: 1000000
cut:
  - at: /blocks/blocks.*
  - not_inside: /encoder/layer.3
limit:
  devices: 4
  only: [gpu0, host:h1]
prefer:
  - ops: phase:update
    not_on: type:T4
    weight: 2
  - ops: [Loss*, "re:a{1,3}"]
    on: gpu0
`

func sel(by, pattern string) Selector { return Selector{By: by, Pattern: pattern} }
func sels(s ...Selector) []Selector   { return s }

var exampleRules = []Rule{
	{Kind: Pin, Source: "c.yaml:2", Ops: sels(sel("module", "/transformer/wte/")), Target: Target{By: "device", Name: "gpu0"}},
	{Kind: Avoid, Source: "c.yaml:5", Ops: sels(sel("phase", "backward")), Target: Target{By: "type", Name: "T4"}},
	{Kind: Colocate, Source: "c.yaml:8", Ops: sels(sel("module", "/tower_a/"), sel("name", "Loss*"))},
	{Kind: Separate, Source: "c.yaml:10", Groups: [][]Selector{{sel("module", "/tower_a/")}, {sel("module", "/tower_b/")}}},
	{Kind: Separate, Source: "c.yaml:11", Groups: [][]Selector{{sel("module", "/a/"), sel("re", "^b.*")}, {sel("type", "MatMul")}, {sel("phase", "update")}}},
	{Kind: Reserve, Source: "c.yaml:13", Target: Target{By: "*"}, Fraction: 0.1},
	{Kind: Reserve, Source: "c.yaml:15", Target: Target{By: "host", Name: "h1"}, Bytes: 2 << 30},
	{Kind: Reserve, Source: "c.yaml:17", Target: Target{By: "device", Name: "gpu1"}, Bytes: 1500000000},
	{Kind: Reserve, Source: "c.yaml:19", Target: Target{By: "device", Name: "gpu2"}, Bytes: 1000000},
	{Kind: Cut, Source: "c.yaml:22", CutAt: "/blocks/blocks.*"},
	{Kind: Cut, Source: "c.yaml:23", NotInside: "/encoder/layer.3/"},
	{Kind: Limit, Source: "c.yaml:25", MaxDevices: 4, Only: []Target{{By: "device", Name: "gpu0"}, {By: "host", Name: "h1"}}},
	{Kind: Prefer, Source: "c.yaml:28", Ops: sels(sel("phase", "update")), Target: Target{By: "type", Name: "T4"}, Not: true, Weight: 2},
	{Kind: Prefer, Source: "c.yaml:31", Ops: sels(sel("name", "Loss*"), sel("re", "a{1,3}")), Target: Target{By: "device", Name: "gpu0"}, Weight: 1},
}

// exampleStrings are exampleRules' canonical spellings.
var exampleStrings = []string{
	"pin module:/transformer/wte/=gpu0",
	"avoid phase:backward=type:T4",
	"colocate module:/tower_a/,name:Loss*",
	"separate module:/tower_a/,module:/tower_b/",
	"separate module:/a/|re:^b.*,type:MatMul,phase:update",
	"reserve *=10%",
	"reserve host:h1=2GiB",
	"reserve gpu1=1500MB",
	"reserve gpu2=1MB",
	"cut /blocks/blocks.*",
	"cut not-inside:/encoder/layer.3/",
	"limit 4,gpu0,host:h1",
	"prefer phase:update=!type:T4@2",
	"prefer name:Loss*,re:a{1,3}=gpu0",
}

func TestParseExample(t *testing.T) {
	set, err := Parse("c.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Rules) != len(exampleRules) {
		t.Fatalf("got %d rules, want %d: %v", len(set.Rules), len(exampleRules), set.Rules)
	}
	for i, r := range set.Rules {
		if !reflect.DeepEqual(r, exampleRules[i]) {
			t.Errorf("rule %d:\n got %#v\nwant %#v", i, r, exampleRules[i])
		}
		if got := r.String(); got != exampleStrings[i] {
			t.Errorf("rule %d: String() = %q, want %q", i, got, exampleStrings[i])
		}
		roundTrip(t, r)
	}
}

// roundTrip checks that ParseFlag reads r's String back as r.
func roundTrip(t *testing.T, r Rule) {
	t.Helper()
	s := r.String()
	value, ok := strings.CutPrefix(s, string(r.Kind)+" ")
	if !ok {
		t.Fatalf("%q does not start with its kind %q", s, r.Kind)
	}
	back, err := ParseFlag(r.Kind, value)
	if err != nil {
		t.Fatalf("ParseFlag(%q, %q) of %#v: %v", r.Kind, value, r, err)
	}
	if back.Source != "--"+string(r.Kind) {
		t.Errorf("ParseFlag(%q, %q).Source = %q", r.Kind, value, back.Source)
	}
	back.Source = r.Source
	if !reflect.DeepEqual(back, r) {
		t.Errorf("ParseFlag(%q, %q)\n got %#v\nwant %#v", r.Kind, value, back, r)
	}
}

func TestParseOrderAndSource(t *testing.T) {
	// Sections come out in Kinds order whatever order the file has them
	// in; entries in file order.
	src := "prefer:\n  - {ops: a, on: gpu0}\nlimit: {devices: 2}\npin:\n  - {ops: b, to: gpu1}\n  - {ops: c, to: gpu2}\n"
	set, err := Parse("r.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range set.Rules {
		got = append(got, r.Source+" "+r.String())
	}
	want := []string{"r.yaml:5 pin name:b=gpu1", "r.yaml:6 pin name:c=gpu2", "r.yaml:3 limit 2", "r.yaml:2 prefer name:a=gpu0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestParseForms(t *testing.T) {
	for _, tt := range []struct {
		src  string
		want string // the rules' String()s, joined by "; "
	}{
		{"limit: {only: gpu0}", "limit gpu0"},
		{"limit: {only: ['4', 'device:4', 'device:a:b', 'device:!x']}", "limit device:4,device:4,device:a:b,device:!x"},
		{"cut: [{at: /blocks/blocks.*/}]", "cut /blocks/blocks.*"},
		{"cut: [{at: not-inside:x}]", "cut at:not-inside:x"},
		{"cut: [{not_inside: /enc/}]", "cut not-inside:/enc/"},
		{"pin: [{ops: 'name:a:b', to: 'device:x:y'}]", "pin name:a:b=device:x:y"},
		{"pin: [{ops: 'name:a,b', to: g}]", `pin "name:a,b"=g`},
		{"pin: [{ops: ['re:x,name:y', 'name:a|b', re:p|q], to: g}]", `pin "re:x,name:y","name:a|b",re:p|q=g`},
		{"pin: [{ops: 're:a=b', to: g}]", "pin re:a=b=g"},
		{"pin: [{ops: 'phase:Backward', to: g}]", "pin phase:backward=g"},
		{"avoid: [{ops: 'module:/', on: '*'}]", "avoid module:/=*"},
		{"prefer: [{ops: a, on: '!x'}]", ""}, // error below
		{"prefer: [{ops: a, on: g, weight: 0}]", "prefer name:a=g@0"},
		{"prefer: [{ops: a, on: g, weight: 1.0}]", "prefer name:a=g"},
		{"prefer: [{ops: a, on: g, weight: 0.25}]", "prefer name:a=g@0.25"},
		{"reserve: [{on: g, amount: 12.5%}]", "reserve g=12.5%"},
		{"reserve: [{on: g, amount: 0.001%}]", "reserve g=0.001%"},
		{"reserve: [{on: g, amount: 512MiB}]", "reserve g=512MiB"},
		{"reserve: [{on: g, amount: 1536 MiB}]", "reserve g=1536MiB"},
		{"reserve: [{on: g, amount: 1001}]", "reserve g=1001"},
	} {
		set, err := Parse("f.yaml", []byte(tt.src))
		if tt.want == "" {
			if err == nil {
				t.Errorf("%q: no error", tt.src)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.src, err)
			continue
		}
		var got []string
		for _, r := range set.Rules {
			got = append(got, r.String())
			roundTrip(t, r)
		}
		if g := strings.Join(got, "; "); g != tt.want {
			t.Errorf("%q: got %q, want %q", tt.src, g, tt.want)
		}
	}
}

func TestParseAliases(t *testing.T) {
	src := "separate:\n  - &g [module:/a/, type:T]\n  - *g\n"
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Rules) != 2 || set.Rules[1].String() != "separate module:/a/,type:T" {
		t.Errorf("got %v", set.Rules)
	}
}

// errorCases are invalid files, the line and field their error names and
// a part of its message.
var errorCases = []struct {
	name, src string
	line      int
	field     string
	msg       string
}{
	{"empty", "", 0, "", "file is empty"},
	{"blank", "  \n\n", 0, "", "file is empty"},
	{"comments only", "# nothing\n", 0, "", "no YAML document"},
	{"null", "~\n", 1, "", "file is empty"},
	{"no rules", "{}\n", 1, "", "holds no rules"},
	{"two documents", "limit: {devices: 1}\n---\nlimit: {devices: 2}\n", 2, "", "more than one YAML document"},
	{"bad yaml", "pin: [\n", 1, "", "not valid YAML"},
	{"alias star", "reserve:\n  - on: *\n    amount: 10%\n", 2, "", "not valid YAML"},
	{"top list", "- pin\n", 1, "", "expected a mapping"},
	{"unknown top key", "pin:\n  - {ops: a, to: g}\npinn: []\n", 3, "", `unknown field "pinn" (known: pin, avoid, colocate, separate, reserve, cut, limit, prefer) (did you mean "pin"?)`},
	{"unknown rule key", "pin:\n  - ops: a\n    to: g\n    onn: x\n", 4, "pin[0]", `unknown field "onn" (known: ops, to)`},
	{"unknown prefer key", "prefer:\n  - ops: a\n    on: g\n    wieght: 2\n", 4, "prefer[0]", `(did you mean "weight"?)`},
	{"duplicate key", "pin:\n  - ops: a\n    to: g\n    to: h\n", 4, "pin[0].to", "given twice (first at line 3)"},
	{"duplicate section", "pin: [{ops: a, to: g}]\npin: [{ops: b, to: g}]\n", 2, "pin", "given twice (first at line 1)"},
	{"section null", "pin:\n", 1, "pin", "has no value"},
	{"section empty list", "pin: []\n", 1, "pin", "empty list"},
	{"section not list", "pin: {ops: a, to: g}\n", 1, "pin", "expected a list of pin rules"},
	{"rule not mapping", "pin:\n  - a=g\n", 2, "pin[0]", "expected a mapping with keys ops, to"},
	{"missing ops", "pin:\n  - to: g\n", 2, "pin[0]", `missing required field "ops"`},
	{"missing to", "pin:\n  - ops: a\n", 2, "pin[0]", `missing required field "to"`},
	{"empty ops", "pin:\n  - ops:\n    to: g\n", 2, "pin[0].ops", "has no value"},
	{"empty ops list", "pin:\n  - ops: []\n    to: g\n", 2, "pin[0].ops", "empty list"},
	{"ops mapping", "pin:\n  - ops: {a: b}\n    to: g\n", 2, "pin[0].ops", "expected a selector, or a list of them"},
	{"nested ops", "pin:\n  - ops: [a, [b]]\n    to: g\n", 2, "pin[0].ops[1]", "expected a selector"},
	{"bad selector prefix", "pin:\n  - ops: modle:/wte/\n    to: g\n", 2, "pin[0].ops", `unknown selector prefix "modle" (did you mean "module"?)`},
	{"name with colon", "avoid:\n  - ops: [a, 'x:y']\n    on: g\n", 2, "avoid[0].ops[1]", "needs the name: prefix (name:x:y)"},
	{"bad phase", "avoid:\n  - ops: phase:backwards\n    on: g\n", 2, "avoid[0].ops", `unknown phase "backwards" (did you mean "backward"?)`},
	{"bad regex", "colocate:\n  - ops: 're:(a'\n", 2, "colocate[0].ops", "bad regular expression \"(a\": missing closing )"},
	{"bad glob", "colocate:\n  - ops: 'name:[a'\n", 2, "colocate[0].ops", `bad name glob "[a"`},
	{"bare bad glob", "colocate:\n  - ops: 'a\\'\n", 2, "colocate[0].ops", `bad name glob`},
	{"empty pattern", "colocate:\n  - ops: 'type:'\n", 2, "colocate[0].ops", "nothing after type:"},
	{"bad target prefix", "pin:\n  - ops: a\n    to: typ:T4\n", 3, "pin[0].to", `unknown target prefix "typ" (did you mean "type"?)`},
	{"target with comma", "pin:\n  - ops: a\n    to: 'g,h'\n", 3, "pin[0].to", `holds ","`},
	{"target bang", "pin:\n  - ops: a\n    to: '!g'\n", 3, "pin[0].to", "device:!g"},
	{"target empty host", "pin:\n  - ops: a\n    to: 'host:'\n", 3, "pin[0].to", "nothing after host:"},
	{"separate one group", "separate:\n  - [module:/a/]\n", 2, "separate[0]", "lists one group"},
	{"separate mapping", "separate:\n  - {ops: a}\n", 2, "separate[0]", "expected a list of two or more op groups"},
	{"separate empty group", "separate:\n  - [a, []]\n", 2, "separate[0][1]", "empty list"},
	{"separate bad", "separate:\n  - [a, [b, 'phase:x']]\n", 2, "separate[0][1][1]", `unknown phase "x"`},
	{"reserve 0%", "reserve:\n  - on: g\n    amount: 0%\n", 3, "reserve[0].amount", "above 0% and below 100%"},
	{"reserve 100%", "reserve:\n  - on: g\n    amount: 100%\n", 3, "reserve[0].amount", "above 0% and below 100%"},
	{"reserve 150%", "reserve:\n  - on: g\n    amount: 150%\n", 3, "reserve[0].amount", "above 0% and below 100%"},
	{"reserve -5%", "reserve:\n  - on: g\n    amount: -5%\n", 3, "reserve[0].amount", "above 0% and below 100%"},
	{"reserve NaN%", "reserve:\n  - on: g\n    amount: NaN%\n", 3, "reserve[0].amount", "cannot read \"NaN%\" as a percentage"},
	{"reserve -1GiB", "reserve:\n  - on: g\n    amount: -1GiB\n", 3, "reserve[0].amount", "negative"},
	{"reserve lots", "reserve:\n  - on: g\n    amount: lots\n", 3, "reserve[0].amount", `cannot read "lots" as a size`},
	{"reserve 0", "reserve:\n  - on: g\n    amount: 0\n", 3, "reserve[0].amount", "keeps nothing free"},
	{"reserve unit", "reserve:\n  - on: g\n    amount: 2Gib\n", 3, "reserve[0].amount", `unknown unit "Gib"`},
	{"reserve no amount", "reserve:\n  - on: g\n", 2, "reserve[0]", `missing required field "amount"`},
	{"reserve no on", "reserve:\n  - amount: 10%\n", 2, "reserve[0]", `missing required field "on"`},
	{"cut both", "cut:\n  - at: /a\n    not_inside: /b\n", 2, "cut[0]", "both at and not_inside"},
	{"cut neither", "cut:\n  - {}\n", 2, "cut[0]", "needs at: PATTERN"},
	{"cut bad glob", "cut:\n  - at: '/a/[b'\n", 2, "cut[0].at", "bad cut pattern"},
	{"cut slash", "cut:\n  - at: /\n", 2, "cut[0].at", "empty cut pattern"},
	{"limit 0", "limit:\n  devices: 0\n", 2, "limit.devices", "at least 1"},
	{"limit -1", "limit:\n  devices: -1\n", 2, "limit.devices", "at least 1"},
	{"limit 2.5", "limit:\n  devices: 2.5\n", 2, "limit.devices", "whole number"},
	{"limit huge", "limit:\n  devices: 99999999999999999999\n", 2, "limit.devices", "too large"},
	{"limit list", "limit:\n  - devices: 2\n", 2, "limit", "limit is one mapping"},
	{"limit empty", "limit: {}\n", 1, "limit", "needs devices: N"},
	{"limit bad only", "limit:\n  only: [g, 'type:']\n", 2, "limit.only[1]", "nothing after type:"},
	{"limit unknown", "limit:\n  device: 2\n", 2, "limit", `unknown field "device" (known: devices, only) (did you mean "devices"?)`},
	{"prefer weight -1", "prefer:\n  - ops: a\n    on: g\n    weight: -1\n", 4, "prefer[0].weight", "negative"},
	{"prefer weight NaN", "prefer:\n  - ops: a\n    on: g\n    weight: NaN\n", 4, "prefer[0].weight", "not finite"},
	{"prefer weight .nan", "prefer:\n  - ops: a\n    on: g\n    weight: .nan\n", 4, "prefer[0].weight", "not finite"},
	{"prefer weight Inf", "prefer:\n  - ops: a\n    on: g\n    weight: Inf\n", 4, "prefer[0].weight", "not finite"},
	{"prefer weight .inf", "prefer:\n  - ops: a\n    on: g\n    weight: .inf\n", 4, "prefer[0].weight", "not finite"},
	{"prefer weight hex", "prefer:\n  - ops: a\n    on: g\n    weight: 0x10\n", 4, "prefer[0].weight", "cannot read weight"},
	{"prefer weight word", "prefer:\n  - ops: a\n    on: g\n    weight: high\n", 4, "prefer[0].weight", "cannot read weight"},
	{"prefer both", "prefer:\n  - ops: a\n    on: g\n    not_on: h\n", 2, "prefer[0]", "gives both on and not_on"},
	{"prefer neither", "prefer:\n  - ops: a\n", 2, "prefer[0]", "needs on: TARGET"},
	{"key not scalar", "pin:\n  - ? [a]\n    : b\n", 2, "pin[0]", "a key must be a plain name"},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.src))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FileError", err, err)
			}
			if fe.File != "bad.yaml" || fe.Line != tt.line || fe.Field != tt.field || !strings.Contains(fe.Msg, tt.msg) {
				t.Errorf("got file %q line %d field %q msg %q\nwant line %d field %q msg containing %q", fe.File, fe.Line, fe.Field, fe.Msg, tt.line, tt.field, tt.msg)
			}
			// The message names file, line and field.
			want := "bad.yaml"
			if tt.line > 0 {
				want += ":" + strconv.Itoa(tt.line)
			}
			want += ": "
			if tt.field != "" {
				want += tt.field + ": "
			}
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want it to start with %q", err.Error(), want)
			}
		})
	}
}

func TestSelectorLimit(t *testing.T) {
	// Aliases can make a short file name a great many selectors.
	src := "colocate:\n  - ops: &a [" + strings.Repeat("a, ", 299) + "a]\n" + strings.Repeat("  - ops: *a\n", 300)
	_, err := Parse("big.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "more than 65536 selectors") {
		t.Errorf("got %v, want the selector limit", err)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("limit: {devices: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := Load(path)
	if err != nil || len(set.Rules) != 1 || set.Rules[0].Source != path+":1" || set.Rules[0].MaxDevices != 2 {
		t.Fatalf("Load = %v, %v", set, err)
	}
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	var fe *FileError
	if err == nil || errors.As(err, &fe) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want the read error", err)
	}
}

func TestFileErrorFormat(t *testing.T) {
	for _, tt := range []struct {
		e    FileError
		want string
	}{
		{FileError{File: "c.yaml", Line: 3, Field: "pin[0].to", Msg: "m"}, "c.yaml:3: pin[0].to: m"},
		{FileError{File: "c.yaml", Msg: "m"}, "c.yaml: m"},
		{FileError{Msg: "m", What: "constraints file"}, "constraints file: m"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
