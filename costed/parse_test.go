package costed_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/graph"
)

// doc wraps ops and edges JSON into a v1 document.
func doc(ops, edges string) string {
	s := `{"format": "opplace-costed-graph/v1", "ops": [` + ops + `]`
	if edges != "" {
		s += `, "edges": [` + edges + `]`
	}
	return s + "}"
}

const opA = `{"name": "a", "times_ms": {"V100-16GB": 1}}`
const opB = `{"name": "b", "times_ms": {"V100-16GB": 1}}`

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", ``, `g.json: no JSON object: the file is empty`},
		{"truncated", `{"format": "opplace-costed-graph/v1", "ops": [`, `g.json: the JSON ends early: the file is truncated`},
		{"syntax", "{\"format\": \"opplace-costed-graph/v1\",\n \"ops\": [}]}", `g.json: invalid JSON at line 2:10: invalid character '}' looking for beginning of value`},
		{"trailing", "{\"format\": \"opplace-costed-graph/v1\"}\n\n  {}", `g.json: unexpected data after the JSON object at line 3:3`},
		{"not object", `[1]`, `g.json: expected a JSON object, got array`},
		{"no format", `{"ops": [` + opA + `]}`, `g.json: format: missing; a costed graph starts with "format": "opplace-costed-graph/v1"`},
		{"version", `{"format": "opplace-costed-graph/v2", "ops": [` + opA + `]}`, `g.json: format: "opplace-costed-graph/v2" is not a format this opplace reads; it reads "opplace-costed-graph/v1"`},
		{"unknown top field", `{"format": "opplace-costed-graph/v1", "opz": []}`, `g.json: unknown field "opz" (known: format, name, ops, edges)`},
		{"no ops", doc("", ""), `g.json: ops: no ops; a costed graph lists at least one`},
		{"unknown op field", doc(`{"name": "a", "times_ms": {"T4": 1}, "colour": "red"}`, ""),
			`g.json: ops[0]: unknown field "colour" (known: name, type, phase, colocate, device, times_ms, param_bytes, output_bytes, temp_bytes)`},
		{"missing name", doc(opA+`, {"times_ms": {"T4": 1}}`, ""), `g.json: ops[1].name: missing; every op needs a unique name`},
		{"duplicate name", doc(opA+`, `+opA, ""), `g.json: ops[1].name: "a" is already the name of ops[0]; op names must be unique`},
		{"negative time", doc(opA+`, {"name": "b", "times_ms": {"V100-16GB": 1, "CPU": -1}}`, ""), `g.json: ops[1].times_ms.CPU: negative time -1`},
		{"string time", doc(`{"name": "a", "times_ms": {"T4": "1"}}`, ""), `g.json: ops[0].times_ms.T4: expected a number, got string`},
		{"no times", doc(`{"name": "a"}`, ""), `g.json: ops[0].times_ms: no time for any device type, so the op could run nowhere; give e.g. {"V100-16GB": 1.5} (milliseconds)`},
		{"only null times", doc(`{"name": "a", "times_ms": {"T4": null}}`, ""), `g.json: ops[0].times_ms: no time for any device type, so the op could run nowhere; give e.g. {"V100-16GB": 1.5} (milliseconds)`},
		{"same type twice", doc(`{"name": "a", "times_ms": {"t4": 1, "T4": 2}}`, ""), `g.json: ops[0].times_ms: "t4" and "T4" name one device type (names ignore case)`},
		{"bad phase", doc(`{"name": "a", "times_ms": {"T4": 1}, "phase": "fwd"}`, ""), `g.json: ops[0].phase: "fwd" is not a phase: use forward, backward or update`},
		{"negative bytes", doc(`{"name": "a", "times_ms": {"T4": 1}, "param_bytes": -4}`, ""), `g.json: ops[0].param_bytes: negative byte count -4`},
		{"fractional bytes", doc(`{"name": "a", "times_ms": {"T4": 1}, "output_bytes": 1.5}`, ""), `g.json: ops[0].output_bytes: 1.5 is not a whole number of bytes`},
		{"huge bytes", doc(`{"name": "a", "times_ms": {"T4": 1}, "temp_bytes": 2e15}`, ""), `g.json: ops[0].temp_bytes: 2e15 bytes is over 1 PiB: is it in bytes?`},
		{"string bytes", doc(`{"name": "a", "times_ms": {"T4": 1}, "temp_bytes": "lots"}`, ""), `g.json: ops[0].temp_bytes: expected a number, got string`},
		{"edge unknown from", doc(opA+`, `+opB, `{"from": "x", "to": "b"}`), `g.json: edges[0].from: no op is named "x"`},
		{"edge unknown to", doc(opA+`, `+opB, `{"from": "a", "to": "b"}, {"from": "a", "to": "bb"}`), `g.json: edges[1].to: no op is named "bb"`},
		{"edge missing from", doc(opA, `{"to": "a"}`), `g.json: edges[0].from: missing; every edge names the op it comes from`},
		{"edge unknown field", doc(opA+`, `+opB, `{"from": "a", "to": "b", "size": 4}`), `g.json: edges[0]: unknown field "size" (known: from, to, tensor, bytes, transfer_ms)`},
		{"self edge", doc(opA, `{"from": "a", "to": "a"}`), `g.json: edges[0]: from and to are both "a": an op cannot feed itself`},
		{"duplicate edge", doc(opA+`, `+opB, `{"from": "a", "to": "b"}, {"from": "a", "to": "b", "bytes": 4}`),
			`g.json: edges[1]: a second edge from "a" to "b" (edges[0]); give one edge with the bytes summed, or name each edge's tensor ("tensor") when they carry different values`},
		{"duplicate edge after named ones", doc(opA+`, `+opB, `{"from": "a", "to": "b", "tensor": "h"}, {"from": "a", "to": "b"}, {"from": "a", "to": "b", "tensor": "c"}, {"from": "a", "to": "b", "bytes": 4}`),
			`g.json: edges[3]: a second edge from "a" to "b" (edges[1]); give one edge with the bytes summed, or name each edge's tensor ("tensor") when they carry different values`},
		{"duplicate named edge", doc(opA+`, `+opB, `{"from": "a", "to": "b", "tensor": "h"}, {"from": "a", "to": "b"}, {"from": "a", "to": "b", "tensor": "h", "bytes": 4}`),
			`g.json: edges[2]: a second edge from "a" to "b" for tensor "h" (edges[0]); a tensor goes once to each op that reads it`},
		{"named tensor of two sizes", doc(opA+`, `+opB+`, {"name": "c", "times_ms": {"T4": 1}}`, `{"from": "a", "to": "b", "tensor": "h", "bytes": 4}, {"from": "a", "to": "c", "tensor": "h"}`),
			`g.json: edges[1]: tensor "h" of "a" differs from edges[0]'s in bytes or transfer_ms; every edge of one named tensor carries the same value`},
		{"named tensor, one transfer time", doc(opA+`, `+opB+`, {"name": "c", "times_ms": {"T4": 1}}`, `{"from": "a", "to": "b", "tensor": "h", "transfer_ms": 1}, {"from": "a", "to": "c", "tensor": "h"}`),
			`g.json: edges[1]: tensor "h" of "a" differs from edges[0]'s in bytes or transfer_ms; every edge of one named tensor carries the same value`},
		{"tensor not a string", doc(opA+`, `+opB, `{"from": "a", "to": "b", "tensor": 1}`), `g.json: edges[0].tensor: expected a string, got number`},
		{"device not a string", doc(`{"name": "a", "times_ms": {"T4": 1}, "device": ["gpu0"]}`, ""), `g.json: ops[0].device: expected a string, got array`},
		{"negative edge bytes", doc(opA+`, `+opB, `{"from": "a", "to": "b", "bytes": -1}`), `g.json: edges[0].bytes: negative byte count -1`},
		{"op name twice", doc(`{"name": "a", "times_ms": {"T4": 1},`+"\n"+` "name": "b"}`, ""),
			`g.json: ops[0].name: key "name" is given twice in one object, the second time on line 2: JSON readers keep either value, so the file means two things; keep one`},
		{"ops twice", `{"format": "opplace-costed-graph/v1", "ops": [` + opA + `], "ops": [` + opB + `]}`,
			`g.json: ops: key "ops" is given twice in one object, the second time on line 1: JSON readers keep either value, so the file means two things; keep one`},
		{"edge end twice", doc(opA+`, `+opB, `{"from": "a", "to": "b", "to": "a"}`),
			`g.json: edges[0].to: key "to" is given twice in one object, the second time on line 1: JSON readers keep either value, so the file means two things; keep one`},
		{"negative transfer", doc(opA+`, `+opB, `{"from": "a", "to": "b", "transfer_ms": -0.5}`), `g.json: edges[0].transfer_ms: negative time -0.5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := costed.Decode([]byte(tc.in), "g.json")
			if err == nil {
				t.Fatalf("no error; want %s", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tc.want)
			}
			var ce *costed.Error
			if !errors.As(err, &ce) || ce.File != "g.json" {
				t.Errorf("error %T does not carry the file name as a *costed.Error", err)
			}
		})
	}
}

func TestCycle(t *testing.T) {
	in := doc(opA+`, `+opB+`, {"name": "c", "times_ms": {"T4": 1}}`,
		`{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "b"}`)
	_, err := costed.Decode([]byte(in), "g.json")
	var ce *graph.CycleError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *graph.CycleError", err)
	}
	if want := "g.json: the graph has a cycle: c -> b -> c;"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
}

func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		head string
		want bool
	}{
		{doc(opA, ""), true},
		{"\ufeff  \n" + doc(opA, ""), true},
		{`{"format": "opplace-costed-graph/v9"}`, true},    // read, then refused by version
		{`{"ops": [{"name": "a", "times_ms": {}}]}`, true}, // format forgotten: our decoder says so
		{`{"maxSizePerFPGA": 1.0, "nodes": []}`, true},
		{`{"nodes": [{"id": 1, "cpuLatency": 1}]}`, true},
		{`{"ops": []}`, false},
		{`{"name": "something else"}`, false},
		{"\x08\x07\x12\x07pytorch", false}, // an ONNX protobuf
		{`[{"format": "opplace-costed-graph/v1"}]`, false},
	} {
		if got := costed.Sniff([]byte(tc.head)); got != tc.want {
			t.Errorf("Sniff(%.40q) = %v, want %v", tc.head, got, tc.want)
		}
	}
}
