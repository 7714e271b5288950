package tf

import (
	"strings"
	"testing"

	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	"google.golang.org/protobuf/encoding/prototext"
)

// Shapes decided by constants whose values a graph lacks (ci with no
// values), recovered by deduction from consumers and, where deduction
// stops, by the assumptions of settle, each named in a warning.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		graph  string
		shapes map[string]string // op -> its first output's shape
		warn   string            // a warning must contain this ("" none of the settle ones)
	}{
		{"unpack fixes a reshape dimension, the count the other",
			ph("x", 1, 34) + ci("t", d(2)) + nd("r", "Reshape", in("x", "t")) + nd("u", "Unpack", in("r"), aI("num", 2), aI("axis", 1)),
			map[string]string{"r": "[17,2]", "u": "[17]"}, "recovered by deduction"},
		{"a constant Pack sibling shapes a computed input",
			ph("z", 2, 3) + ci("t", d(2)) + nd("r", "Reshape", in("z", "t")) + cf("k", 3, 2) + nd("p", "Pack", in("k", "r")),
			map[string]string{"r": "[3,2]", "p": "[2,3,2]"}, "recovered by deduction"},
		{"broadcast: an output size 1 makes the input 1, the count the rest",
			ph("x", 1, 10) + ci("t", d(2)) + nd("r", "Reshape", in("x", "t")) + cf("b", 1, 10) + nd("a", "AddV2", in("r", "b")) +
				ph("w", 1, 10) + nd("p", "Pack", in("a", "w")),
			map[string]string{"r": "[1,10]", "a": "[1,10]"}, "recovered by deduction"},
		{"broadcast and count decide an ExpandDims axis",
			ph("x", 2, 3) + ci("ax", nil) + nd("e", "ExpandDims", in("x", "ax")) + ph("y", 2, 1, 3) + nd("m", "AddV2", in("e", "y")) +
				ci("s", d(1), 6) + nd("f", "Reshape", in("m", "s")),
			map[string]string{"e": "[2,1,3]", "m": "[2,1,3]"}, "ax=1"},
		{"squeeze_dims decide an ExpandDims axis",
			ph("x", 3, 4) + ci("ax", nil) + nd("e", "ExpandDims", in("x", "ax")) + nd("s", "Squeeze", in("e"), aIs("squeeze_dims", 0)),
			map[string]string{"e": "[1,3,4]", "s": "[3,4]"}, "ax=0"},
		{"concat axis and the missing size deduced from the output",
			ph("a", 2, 3) + ph("y", 4) + ci("t", d(2)) + nd("r", "Reshape", in("y", "t")) + ci("ax", nil) +
				nd("c", "ConcatV2", in("a", "r", "ax")) + ph("w", 2, 5) + nd("p", "Pack", in("c", "w")),
			map[string]string{"r": "[2,2]", "c": "[2,5]"}, "ax=1"},
		{"argmax candidates and the reshape preference",
			ph("x", 1, 8, 8, 1) + ci("t", d(3)) + nd("r", "Reshape", in("x", "t")) + ci("ax", nil) +
				nd("am", "ArgMax", in("r", "ax"), aT("output_type", "DT_INT32")) + ci("k", d(1, 1)) + nd("p", "Pack", in("am", "k")),
			map[string]string{"r": "[1,64,1]", "am": "[1,1]"}, "r=[1,64,1]"},
		{"gather_nd output and the reshape preference",
			ph("x", 17, 34) + ci("t", d(3)) + nd("r", "Reshape", in("x", "t")) + ci("i", d(17, 2)) + nd("g", "GatherNd", in("r", "i")) +
				nd("u", "Unpack", in("g"), aI("num", 2), aI("axis", 1)),
			map[string]string{"r": "[17,17,2]", "g": "[17,2]"}, "r=[17,17,2]"},
		{"residual add: a padded activation takes its partner's shape",
			ph("x", 1, 8, 8, 4) + ci("pads", d(4, 2)) + nd("p", "Pad", in("x", "pads")) + ph("y", 1, 8, 8, 3) + cf("w", 1, 1, 3, 8) +
				nd("c", "Conv2D", in("y", "w"), aIs("strides", 1, 1, 1, 1), aS("padding", "SAME")) + nd("a", "AddV2", in("c", "p")),
			map[string]string{"p": "[1,8,8,8]", "a": "[1,8,8,8]"}, "as in a residual add"},
		{"no residual assumption against a weight",
			ph("x", 1, 8, 8, 4) + ci("pads", d(4, 2)) + nd("p", "Pad", in("x", "pads")) + cf("b", 1, 8, 8, 8) + nd("a", "AddV2", in("p", "b")),
			map[string]string{"p": "[?,?,?,?]", "a": "[?,8,8,8]"}, ""},
		{"an axis no shape decides is tried, first fitting value kept",
			ph("x", 3) + ci("ax", nil) + nd("e", "ExpandDims", in("x", "ax")) + nd("r", "Relu", in("e")),
			map[string]string{"e": "[1,3]", "r": "[1,3]"}, "allow several"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := convertText(t, tc.graph)
			for op, want := range tc.shapes {
				i, ok := c.index[op]
				if !ok {
					t.Fatalf("no op %s", op)
				}
				if got := c.vals[i][0].String(); got != want {
					t.Errorf("%s: shape %s, want %s", op, got, want)
				}
			}
			warnings := c.finishWarnings()
			all := strings.Join(warnings, "\n")
			if tc.warn != "" && !strings.Contains(all, tc.warn) {
				t.Errorf("warnings %q lack %q", warnings, tc.warn)
			}
			if tc.warn == "" && (strings.Contains(all, "assumed") || strings.Contains(all, "axis constants")) {
				t.Errorf("unexpected assumption: %q", warnings)
			}
		})
	}
}

// convertText imports a text GraphDef and returns the converter, so
// tests can read partial shapes (value.String: "[?,8]") and warnings.
func convertText(t *testing.T, g string) *converter {
	t.Helper()
	gd := &graphpb.GraphDef{}
	if err := prototext.Unmarshal([]byte(g), gd); err != nil {
		t.Fatal(err)
	}
	c := newConverter("t.pbtxt", Options{}, nil)
	if _, err := c.convert(gd); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMeet(t *testing.T) {
	v := func(count int64, dims ...int64) *value { return &value{shape: dims, ranked: true, count: count} }
	for _, tc := range []struct {
		a, b *value
		want string
		ok   bool
	}{
		{v(12, -1, 3), v(0, 4, -1), "[4,3]", true},
		{v(12, -1, 3), v(0, -1, -1), "[4,3]", true},           // the count decides the one unknown
		{v(1, -1, -1, -1), &value{}, "[1,1,1]", true},         // a one-element tensor is all ones
		{v(6, -1, -1), v(0, -1, 2), "[3,2]", true},            // count and a known size
		{v(0, 2, -1), v(0, 3, -1), "", false},                 // sizes disagree
		{v(0, 2, -1), v(0, 2), "", false},                     // ranks disagree
		{v(10, -1, 3), v(0, -1, -1), "", false},               // 3 does not divide 10
		{&value{count: 8}, v(0, 2, -1, 2), "[2,2,2]", true},   // rank from one side, count from the other
		{v(24, -1, -1, 2), v(0, -1, -1, -1), "[?,?,2]", true}, // two unknowns: nothing to fill
	} {
		got, ok := meet(tc.a, tc.b)
		if ok != tc.ok || ok && got.String() != tc.want {
			t.Errorf("meet(%s#%d, %s#%d) = %s %v, want %s %v", tc.a, tc.a.count, tc.b, tc.b.count, got, ok, tc.want, tc.ok)
		}
	}
}

// The reshape preference keeps leading and trailing input dimensions and
// refuses to choose between shapes that keep equally many.
func TestReshapePreference(t *testing.T) {
	for _, tc := range []struct {
		in   []int64
		out  *value
		want string
	}{
		{d(17, 34), &value{shape: d(-1, -1, 2), ranked: true, count: 578}, "[17,17,2]"},
		{d(2, 4, 4, 8), &value{shape: d(-1, -1, -1), ranked: true, count: 256}, "[2,16,8]"},
		{d(1, 48, 48, 1), &value{shape: d(-1, -1, -1), ranked: true, count: 2304}, "<nil>"}, // [1,48,48] and [48,48,1] keep 3 each
		{d(6, 5), &value{shape: d(-1, -1, 1), ranked: true, count: 30}, "[6,5,1]"},
		{d(6, 5), &value{shape: d(-1, -1, -1), ranked: true, count: 30}, "[6,1,5]"}, // keeps both ends
	} {
		got := preferred(tc.in, reshapeCandidates(tc.in, tc.out))
		s := "<nil>"
		if got != nil {
			s = got.String()
		}
		if s != tc.want {
			t.Errorf("%v -> %s: %s, want %s", tc.in, tc.out, s, tc.want)
		}
	}
}

// Malformed graphs reaching the backward rules and assumptions give an
// error or a model, never a panic.
func TestSettleMalformed(t *testing.T) {
	for _, g := range []string{
		// concat of mixed ranks with an unknown axis, output shaped by Pack
		ph("a", 2, 3) + ph("b", 2, 3, 1) + ci("ax", nil) + nd("c", "ConcatV2", in("a", "b", "ax")) + ph("w", 2, 5) + nd("p", "Pack", in("c", "w")),
		// gather_nd whose indices claim a huge depth
		ph("x", 4, 4) + ci("i", d(3, 1<<40)) + nd("g", "GatherNd", in("x", "i")) + nd("u", "Unpack", in("g"), aI("num", 2), aI("axis", 1)),
		// squeeze_dims repeated and out of range
		ph("x", 1, 3) + ci("t", d(2)) + nd("r", "Reshape", in("x", "t")) + nd("s", "Squeeze", in("r"), aIs("squeeze_dims", 0, 0, 7)) + nd("y", "Relu", in("s")),
		// a reduction over one axis spelled twice
		ph("x", 2, 3, 4) + ci("t", d(3)) + nd("r", "Reshape", in("x", "t")) + ci("ax", d(2), 1, -2) + nd("m", "Sum", in("r", "ax")) +
			ph("w", 2, 4) + nd("p", "Pack", in("m", "w")),
		// unpack whose num disagrees with a reshape the count decides
		ph("x", 1, 35) + ci("t", d(2)) + nd("r", "Reshape", in("x", "t")) + nd("u", "Unpack", in("r"), aI("num", 2), aI("axis", 1)),
	} {
		_, _ = Decode([]byte(g), "t.pbtxt", Options{})
	}
}
