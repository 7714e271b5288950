package costed_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opplace/opplace/costed"
)

// TestRangeErrors: costs a profiler cannot have measured are refused at
// import, naming the op, the field and the value, instead of reaching
// the simulator as +Inf (1e308 ms was accepted and the plan then failed
// to be written).
func TestRangeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"1e308 ms", doc(opA+`, {"name": "b", "times_ms": {"V100-16GB": 1e308}}`, ""),
			`g.json: ops[1].times_ms.V100-16GB: 1e+308 ms for op "b" is more than a day (8.64e+07 ms): times are in milliseconds`},
		{"over a day", doc(`{"name": "a", "times_ms": {"T4": 86400001}}`, ""),
			`g.json: ops[0].times_ms.T4: 8.6400001e+07 ms for op "a" is more than a day (8.64e+07 ms): times are in milliseconds`},
		{"overflow", doc(`{"name": "a", "times_ms": {"T4": 1e400}}`, ""), `g.json: ops[0].times_ms.T4: 1e400 is out of range for a number`},
		{"negative", doc(`{"name": "a", "times_ms": {"T4": -0.001}}`, ""), `g.json: ops[0].times_ms.T4: negative time -0.001`},
		{"transfer over a day", doc(opA+`, `+opB, `{"from": "a", "to": "b", "transfer_ms": 1e300}`),
			`g.json: edges[0].transfer_ms: 1e+300 ms for the transfer from "a" to "b" is more than a day (8.64e+07 ms): times are in milliseconds`},
		{"bytes over 2^62", doc(`{"name": "a", "times_ms": {"T4": 1}, "param_bytes": 4611686018427387905}`, ""),
			`g.json: ops[0].param_bytes: 4611686018427387905 bytes is over 1 PiB: is it in bytes?`},
		{"bytes over int64", doc(`{"name": "a", "times_ms": {"T4": 1}, "output_bytes": 1e300}`, ""),
			`g.json: ops[0].output_bytes: 1e300 bytes is over 1 PiB: is it in bytes?`},
		{"negative float bytes", doc(`{"name": "a", "times_ms": {"T4": 1}, "output_bytes": -1e30}`, ""),
			`g.json: ops[0].output_bytes: negative byte count -1e30`},
		{"edge bytes over 1 PiB", doc(opA+`, `+opB, `{"from": "a", "to": "b", "bytes": 1125899906842625}`),
			`g.json: edges[0].bytes: 1125899906842625 bytes is over 1 PiB: is it in bytes?`},
		{"same type twice", doc(`{"name": "a", "times_ms": {"T4": 1, "T4": 2}}`, ""), `g.json: ops[0].times_ms: "T4" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := costed.Decode([]byte(tc.in), "g.json")
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
	// Many ops each under 1 PiB can still add up past what an int64 of
	// bytes holds.
	var ops []string
	for range 4100 {
		ops = append(ops, `{"name": "x`+strings.Repeat("y", len(ops))+`", "times_ms": {"T4": 1}, "param_bytes": 1125899906842624}`)
	}
	_, err := costed.Decode([]byte(doc(strings.Join(ops, ", "), "")), "g.json")
	if err == nil || !strings.Contains(err.Error(), "add up to more than 2^62 bytes") {
		t.Errorf("4100 ops of 1 PiB: %v", err)
	}
}

// TestSyntaxErrors: JSON the scanner must refuse as encoding/json does,
// with its message and, on one line, its column.
func TestSyntaxErrors(t *testing.T) {
	const head = `{"format": "opplace-costed-graph/v1", "ops": [`
	for _, in := range []string{
		head + "{\"name\": \"a\tb\"}]}",
		head + `{"name": "a\qb"}]}`,
		head + `{"name": "a\u12x4"}]}`,
		head + `{"name": "a\u12"}]}`,
		head + `{"name": "a", "times_ms": {"T4": 01}}]}`,
		head + `{"name": "a", "times_ms": {"T4": 1.}}]}`,
		head + `{"name": "a", "times_ms": {"T4": 1e+}}]}`,
		head + `{"name": "a", "times_ms": {"T4": -}}]}`,
		head + `{"name": "a", "times_ms": {"T4": +1}}]}`,
		head + `{"name": "a",}]}`,
		head + `{"name" "a"}]}`,
		head + `{"name": "a" "type": "b"}]}`,
		head + `{"name": nul}]}`,
		head + `{"name": "a", "times_ms": {"T4": 1}} {}]}`,
		head + `{"name": "a", "times_ms": {"T4": 1}},]}`,
		`{"format": "opplace-costed-graph/v1" 1}`,
	} {
		var v any
		var se *json.SyntaxError
		if err := json.Unmarshal([]byte(in), &v); !errors.As(err, &se) {
			t.Fatalf("encoding/json: %v for %q", err, in)
		}
		want := fmt.Sprintf("invalid JSON at line 1:%d: %s", se.Offset, se.Error())
		_, err := costed.Decode([]byte(in), "g.json")
		var ce *costed.Error
		if !errors.As(err, &ce) || ce.Msg != want {
			t.Errorf("%s\n got: %v\nwant: g.json: %s", in, err, want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{head + `{"name": "a`, `the JSON ends early: the file is truncated`},
		{head + `{"name": "a", "times_ms": {"T4": 1`, `the JSON ends early: the file is truncated`},
		{head + "\n  {\"name\": \"a\", \"times_ms\": {\"T4\": 1}},\n  ]}", `invalid JSON at line 3:3: invalid character ']' looking for beginning of value`},
	} {
		_, err := costed.Decode([]byte(tc.in), "g.json")
		var ce *costed.Error
		if !errors.As(err, &ce) || ce.Msg != tc.want {
			t.Errorf("%q\n got: %v\nwant: g.json: %s", tc.in, err, tc.want)
		}
	}
}

// TestStrings: escapes and UTF-8 decode as encoding/json decodes them.
func TestStrings(t *testing.T) {
	for _, name := range []string{`a\"b`, `\u00e9\n\t\/\\`, `\ud83d\ude00`, `\ud83d x`, "caf\xc3\xa9", "bad\xffbyte", `\u0000`} {
		in := doc(`{"name": "`+name+`", "times_ms": {"T4": 1}}`, "")
		var want string
		if err := json.Unmarshal([]byte(`"`+name+`"`), &want); err != nil {
			t.Fatal(err)
		}
		m, err := costed.Decode([]byte(in), "g.json")
		if err != nil {
			t.Errorf("%q: %v", name, err)
			continue
		}
		if got := m.Graph.Ops[0].Name; got != want {
			t.Errorf("%q decodes to %q, want %q", name, got, want)
		}
	}
}

// TestKeyOrder: the graph is the same whatever order the document's keys
// come in (edges are resolved as they are read only when the ops came
// first). A key given twice is refused (TestParseErrors).
func TestKeyOrder(t *testing.T) {
	ops := `"ops": [` + opA + `, ` + opB + `, {"name": "c", "times_ms": {"T4": 1}}]`
	edges := `"edges": [{"from": "a", "to": "b"}, {"from": "a", "to": "c", "bytes": 7}, {"from": "b", "to": "c"}]`
	for _, in := range []string{
		`{"format": "opplace-costed-graph/v1", ` + ops + `, ` + edges + `}`,
		`{"format": "opplace-costed-graph/v1", ` + edges + `, ` + ops + `}`,
	} {
		m, err := costed.Decode([]byte(in), "g.json")
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		g := m.Graph
		var got []string
		for i := range g.Ops {
			for _, in := range g.Ops[i].Inputs {
				got = append(got, g.Tensors[in].Name+">"+g.Ops[i].Name)
			}
		}
		if want := "a>b a->c>c b>c"; strings.Join(got, " ") != want {
			t.Errorf("%s: edges %v, want %s", in, got, want)
		}
	}
	_, err := costed.Decode([]byte(doc(opA+`, `+opB+`, `+opA, `{"from": "a", "to": "b"}`)), "g.json")
	if want := `g.json: ops[2].name: "a" is already the name of ops[0]; op names must be unique`; err == nil || err.Error() != want {
		t.Errorf("duplicate name: %v, want %s", err, want)
	}
}
