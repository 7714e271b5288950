package constraint

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func dev(name string) Target { return Target{By: TargetDevice, Name: name} }

// flagCases are flag values, the rule each gives (Source aside) and its
// canonical String.
var flagCases = []struct {
	kind  Kind
	value string
	want  Rule
	str   string
}{
	{Pin, "module:/wte=gpu0", Rule{Kind: Pin, Ops: sels(sel("module", "/wte/")), Target: dev("gpu0")}, "pin module:/wte/=gpu0"},
	{Pin, "/wte/Gather=host:h1", Rule{Kind: Pin, Ops: sels(sel("name", "/wte/Gather")), Target: Target{By: "host", Name: "h1"}}, "pin name:/wte/Gather=host:h1"},
	{Pin, " module:/a/ , name:Loss* = type:A100 ", Rule{Kind: Pin, Ops: sels(sel("module", "/a/"), sel("name", "Loss*")), Target: Target{By: "type", Name: "A100"}}, "pin module:/a/,name:Loss*=type:A100"},
	{Pin, "module:/a/|type:MatMul=gpu1", Rule{Kind: Pin, Ops: sels(sel("module", "/a/"), sel("type", "MatMul")), Target: dev("gpu1")}, "pin module:/a/,type:MatMul=gpu1"},
	{Pin, "re:^a=b$=gpu0", Rule{Kind: Pin, Ops: sels(sel("re", "^a=b$")), Target: dev("gpu0")}, "pin re:^a=b$=gpu0"},
	{Pin, "re:a{1,3}|b,type:X=gpu0", Rule{Kind: Pin, Ops: sels(sel("re", "a{1,3}|b"), sel("type", "X")), Target: dev("gpu0")}, "pin re:a{1,3}|b,type:X=gpu0"},
	{Pin, `"name:a,b",name:c=gpu0`, Rule{Kind: Pin, Ops: sels(sel("name", "a,b"), sel("name", "c")), Target: dev("gpu0")}, `pin "name:a,b",name:c=gpu0`},
	{Pin, `re:x,"re:y,name:z"=gpu0`, Rule{Kind: Pin, Ops: sels(sel("re", "x"), sel("re", "y,name:z")), Target: dev("gpu0")}, `pin re:x,"re:y,name:z"=gpu0`},
	{Pin, "name:a:b=device:gpu:0", Rule{Kind: Pin, Ops: sels(sel("name", "a:b")), Target: dev("gpu:0")}, "pin name:a:b=device:gpu:0"},
	{Pin, "a=device:7", Rule{Kind: Pin, Ops: sels(sel("name", "a")), Target: dev("7")}, "pin name:a=device:7"},
	{Pin, "a=7", Rule{Kind: Pin, Ops: sels(sel("name", "a")), Target: dev("7")}, "pin name:a=device:7"},
	{Avoid, "phase:backward=type:T4", Rule{Kind: Avoid, Ops: sels(sel("phase", "backward")), Target: Target{By: "type", Name: "T4"}}, "avoid phase:backward=type:T4"},
	{Avoid, "phase:UPDATE=*", Rule{Kind: Avoid, Ops: sels(sel("phase", "update")), Target: Target{By: "*"}}, "avoid phase:update=*"},
	{Colocate, "module:/tower_a/", Rule{Kind: Colocate, Ops: sels(sel("module", "/tower_a/"))}, "colocate module:/tower_a/"},
	{Colocate, "module:/tower_a/,name:Loss*", Rule{Kind: Colocate, Ops: sels(sel("module", "/tower_a/"), sel("name", "Loss*"))}, "colocate module:/tower_a/,name:Loss*"},
	{Separate, "module:/a/,module:/b/", Rule{Kind: Separate, Groups: [][]Selector{{sel("module", "/a/")}, {sel("module", "/b/")}}}, "separate module:/a/,module:/b/"},
	{Separate, "module:/a/|name:L*,module:/b/,phase:update", Rule{Kind: Separate, Groups: [][]Selector{{sel("module", "/a/"), sel("name", "L*")}, {sel("module", "/b/")}, {sel("phase", "update")}}}, "separate module:/a/|name:L*,module:/b/,phase:update"},
	{Separate, "re:a|b,re:c", Rule{Kind: Separate, Groups: [][]Selector{{sel("re", "a|b")}, {sel("re", "c")}}}, "separate re:a|b,re:c"},
	{Reserve, "type:A100=10%", Rule{Kind: Reserve, Target: Target{By: "type", Name: "A100"}, Fraction: 0.1}, "reserve type:A100=10%"},
	{Reserve, "*=2GiB", Rule{Kind: Reserve, Target: Target{By: "*"}, Bytes: 2 << 30}, "reserve *=2GiB"},
	{Reserve, "gpu0 = 512 MiB", Rule{Kind: Reserve, Target: dev("gpu0"), Bytes: 512 << 20}, "reserve gpu0=512MiB"},
	{Reserve, "gpu0=33.3%", Rule{Kind: Reserve, Target: dev("gpu0"), Fraction: 33.3 / 100}, "reserve gpu0=33.3%"},
	{Reserve, "gpu0=1.5GB", Rule{Kind: Reserve, Target: dev("gpu0"), Bytes: 1500000000}, "reserve gpu0=1500MB"},
	{Reserve, "gpu0=1000001", Rule{Kind: Reserve, Target: dev("gpu0"), Bytes: 1000001}, "reserve gpu0=1000001"},
	{Cut, "/blocks/blocks.*", Rule{Kind: Cut, CutAt: "/blocks/blocks.*"}, "cut /blocks/blocks.*"},
	{Cut, "at:/blocks/blocks.*/", Rule{Kind: Cut, CutAt: "/blocks/blocks.*"}, "cut /blocks/blocks.*"},
	{Cut, "not-inside:/encoder/layer.3", Rule{Kind: Cut, NotInside: "/encoder/layer.3/"}, "cut not-inside:/encoder/layer.3/"},
	{Cut, "at:not-inside:x", Rule{Kind: Cut, CutAt: "not-inside:x"}, "cut at:not-inside:x"},
	{Limit, "4", Rule{Kind: Limit, MaxDevices: 4}, "limit 4"},
	{Limit, "gpu0,host:h1", Rule{Kind: Limit, Only: []Target{dev("gpu0"), {By: "host", Name: "h1"}}}, "limit gpu0,host:h1"},
	{Limit, "gpu0, 2", Rule{Kind: Limit, MaxDevices: 2, Only: []Target{dev("gpu0")}}, "limit 2,gpu0"},
	{Limit, "device:4,type:T4", Rule{Kind: Limit, Only: []Target{dev("4"), {By: "type", Name: "T4"}}}, "limit device:4,type:T4"},
	{Prefer, "phase:update=!type:T4@2", Rule{Kind: Prefer, Ops: sels(sel("phase", "update")), Target: Target{By: "type", Name: "T4"}, Not: true, Weight: 2}, "prefer phase:update=!type:T4@2"},
	{Prefer, "module:/wte/=gpu0", Rule{Kind: Prefer, Ops: sels(sel("module", "/wte/")), Target: dev("gpu0"), Weight: 1}, "prefer module:/wte/=gpu0"},
	{Prefer, "a=gpu0@0", Rule{Kind: Prefer, Ops: sels(sel("name", "a")), Target: dev("gpu0"), Weight: 0}, "prefer name:a=gpu0@0"},
	{Prefer, "a=!device:!x@1.5", Rule{Kind: Prefer, Ops: sels(sel("name", "a")), Target: dev("!x"), Not: true, Weight: 1.5}, "prefer name:a=!device:!x@1.5"},
	{Prefer, "a=gpu0@-0", Rule{Kind: Prefer, Ops: sels(sel("name", "a")), Target: dev("gpu0"), Weight: 0}, "prefer name:a=gpu0@0"},
}

func TestParseFlag(t *testing.T) {
	for _, tt := range flagCases {
		r, err := ParseFlag(tt.kind, tt.value)
		if err != nil {
			t.Errorf("ParseFlag(%q, %q): %v", tt.kind, tt.value, err)
			continue
		}
		if r.Source != "--"+string(tt.kind) {
			t.Errorf("ParseFlag(%q, %q).Source = %q", tt.kind, tt.value, r.Source)
		}
		want := tt.want
		want.Source = r.Source
		if !reflect.DeepEqual(r, want) {
			t.Errorf("ParseFlag(%q, %q)\n got %#v\nwant %#v", tt.kind, tt.value, r, want)
		}
		if got := r.String(); got != tt.str {
			t.Errorf("ParseFlag(%q, %q).String() = %q, want %q", tt.kind, tt.value, got, tt.str)
		}
		roundTrip(t, r)
	}
}

// flagErrors are flag values ParseFlag refuses, with part of the message.
var flagErrors = []struct {
	kind  Kind
	value string
	msg   string
}{
	{"pinn", "a=b", `unknown rule "pinn" (did you mean "pin"?)`},
	{Pin, "module:/wte/", "missing =TARGET; write --pin SELECTOR=TARGET, like --pin module:/wte/=gpu0"},
	{Pin, "=gpu0", "no selector before '='"},
	{Pin, "a=", "empty target"},
	{Pin, "a=g,h", `holds ","`},
	{Pin, "a=!g", "starts with '!'"},
	{Pin, "modle:/wte/=gpu0", `unknown selector prefix "modle" (did you mean "module"?)`},
	{Pin, "a:b=gpu0", "needs the name: prefix (name:a:b)"},
	{Pin, "a,,b=gpu0", "empty selector between separators"},
	{Pin, "a,=gpu0", "empty selector between separators"},
	{Pin, `"name:a=gpu0`, "not a complete Go string"},
	{Pin, `"name:a"x=gpu0`, "after the quoted selector"},
	{Pin, `""=gpu0`, "empty selector"},
	{Pin, "a=typ:T4", `unknown target prefix "typ" (did you mean "type"?)`},
	{Avoid, "phase:fwd=gpu0", `unknown phase "fwd"; a phase is forward, backward or update`},
	{Avoid, "re:(a=gpu0", "bad regular expression \"(a\": missing closing )"},
	{Avoid, "name:[a=gpu0", `bad name glob "[a"`},
	{Colocate, "", "no selector"},
	{Colocate, "type:", "nothing after type:"},
	{Separate, "module:/a/", "names one group; separate needs two or more"},
	{Separate, "module:/a/|module:/b/", "names one group"},
	{Separate, "module:/a/,", "empty selector"},
	{Reserve, "gpu0", "missing =AMOUNT; write --reserve TARGET=AMOUNT, like --reserve type:A100=10%"},
	{Reserve, "gpu0=0%", "above 0% and below 100%"},
	{Reserve, "gpu0=100%", "above 0% and below 100%"},
	{Reserve, "gpu0=150%", "above 0% and below 100%"},
	{Reserve, "gpu0=-1GiB", "negative"},
	{Reserve, "gpu0=lots", `cannot read "lots" as a size`},
	{Reserve, "gpu0=0", "keeps nothing free"},
	{Reserve, "gpu0=", "empty amount"},
	{Reserve, "=10%", "empty target"},
	{Cut, "", "empty cut pattern"},
	{Cut, "/a/[b", "bad cut pattern"},
	{Cut, "not-inside:", "empty module path"},
	{Limit, "0", "leaves no device"},
	{Limit, "-2", "leaves no device"},
	{Limit, "", "empty target"},
	{Limit, "2,3", "gives two device counts"},
	{Limit, "99999999999999999999", "too large"},
	{Limit, "gpu0,", "empty target"},
	{Prefer, "a", "missing =TARGET; write --prefer SELECTOR=[!]TARGET[@WEIGHT]"},
	{Prefer, "a=gpu0@-1", "negative"},
	{Prefer, "a=gpu0@NaN", "not finite"},
	{Prefer, "a=gpu0@Inf", "not finite"},
	{Prefer, "a=gpu0@", "cannot read weight"},
	{Prefer, "a=gpu0@x", "cannot read weight"},
	{Prefer, "a=!@2", "empty target"},
}

func TestParseFlagErrors(t *testing.T) {
	for _, tt := range flagErrors {
		_, err := ParseFlag(tt.kind, tt.value)
		var fe *FlagError
		if !errors.As(err, &fe) {
			t.Errorf("ParseFlag(%q, %q) = %v (%T), want a *FlagError", tt.kind, tt.value, err, err)
			continue
		}
		prefix := "--" + string(tt.kind) + " " + strconv.Quote(tt.value) + ": "
		if fe.Flag != "--"+string(tt.kind) || fe.Value != tt.value || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(fe.Msg, tt.msg) {
			t.Errorf("ParseFlag(%q, %q) = %q, want it to start %q and hold %q", tt.kind, tt.value, err, prefix, tt.msg)
		}
	}
}

func TestParseSelector(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Selector
	}{
		{"Loss*", sel("name", "Loss*")},
		{"name:a:b", sel("name", "a:b")},
		{" name: x ", sel("name", "x")},
		{"re:^/blocks/blocks\\.[0-5]/", sel("re", "^/blocks/blocks\\.[0-5]/")},
		{"type:MatMul", sel("type", "MatMul")},
		{"module:/blocks/blocks.6", sel("module", "/blocks/blocks.6/")},
		{"module:/blocks/blocks.6/", sel("module", "/blocks/blocks.6/")},
		{"module:blocks", sel("module", "blocks/")},
		{"phase:Forward", sel("phase", "forward")},
		{"phase:backward", sel("phase", "backward")},
		{"phase:update", sel("phase", "update")},
	} {
		got, err := ParseSelector(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSelector(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			continue
		}
		if back, err := ParseSelector(got.String()); err != nil || back != got {
			t.Errorf("ParseSelector(%q) = %v, %v; want %v", got.String(), back, err, got)
		}
	}
	for _, in := range []string{"", "name:", "nmae:x", "x:y", "re:(", "name:[", "phase:grad", "module:", "Name:x"} {
		if _, err := ParseSelector(in); err == nil {
			t.Errorf("ParseSelector(%q): no error", in)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Target
		str  string
	}{
		{"gpu0", dev("gpu0"), "gpu0"},
		{" gpu0 ", dev("gpu0"), "gpu0"},
		{"*", Target{By: "*"}, "*"},
		{"type:T4", Target{By: "type", Name: "T4"}, "type:T4"},
		{"host:h1", Target{By: "host", Name: "h1"}, "host:h1"},
		{"device:gpu0", dev("gpu0"), "gpu0"},
		{"device:*", dev("*"), "device:*"},
		{"device:a:b", dev("a:b"), "device:a:b"},
		{"device:12", dev("12"), "device:12"},
		{"type:*", Target{By: "type", Name: "*"}, "type:*"},
	} {
		got, err := ParseTarget(tt.in)
		if err != nil || got != tt.want || got.String() != tt.str {
			t.Errorf("ParseTarget(%q) = %v (%q), %v; want %v (%q)", tt.in, got, got.String(), err, tt.want, tt.str)
			continue
		}
		if back, err := ParseTarget(got.String()); err != nil || back != got {
			t.Errorf("ParseTarget(%q) = %v, %v; want %v", got.String(), back, err, got)
		}
	}
	for _, in := range []string{"", "type:", "tpe:x", "!g", "a b", "a=b", "a@b", `a"b`, "host:a,b", "a\tb"} {
		if _, err := ParseTarget(in); err == nil {
			t.Errorf("ParseTarget(%q): no error", in)
		}
	}
}

// TestStringQuoting checks hand-made rules whose selectors need quoting
// in the one-line spelling.
func TestStringQuoting(t *testing.T) {
	for _, r := range []Rule{
		{Kind: Separate, Groups: [][]Selector{{sel("name", "a,b"), sel("name", "c|d")}, {sel("re", `x,"y`), sel("re", "p|type:q")}}},
		{Kind: Colocate, Ops: sels(sel("re", "a,|b"), sel("name", `"q"`), sel("type", "a=b"))},
		{Kind: Pin, Ops: sels(sel("re", "a, name:b")), Target: dev("g")},
		{Kind: Prefer, Ops: sels(sel("name", "\x00\xff"), sel("module", "/a,b/")), Target: dev("@"[:0] + "x"), Weight: 1e-300},
		{Kind: Reserve, Target: dev("g"), Fraction: 1e-12},
		{Kind: Reserve, Target: dev("g"), Fraction: 0.999999999},
		{Kind: Reserve, Target: dev("g"), Bytes: 1 << 52},
	} {
		roundTrip(t, r)
	}
}

// FuzzParseFlag checks that ParseFlag never panics, fails only with a
// *FlagError, and that every rule it reads spells back to itself.
//
//	go test ./constraint -run '^$' -fuzz FuzzParseFlag -fuzztime 1m
func FuzzParseFlag(f *testing.F) {
	for _, tt := range flagCases {
		f.Add(string(tt.kind), tt.value)
	}
	for _, tt := range flagErrors {
		f.Add(string(tt.kind), tt.value)
	}
	f.Fuzz(func(t *testing.T, kind, value string) {
		r, err := ParseFlag(Kind(kind), value)
		if err != nil {
			var fe *FlagError
			if !errors.As(err, &fe) || fe.Msg == "" {
				t.Fatalf("error %q (%T) is not a complete *FlagError", err, err)
			}
			return
		}
		roundTrip(t, r)
	})
}
