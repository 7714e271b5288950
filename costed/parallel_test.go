package costed

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// synthDoc is a v1 document of n ops in a chain, each op after the first
// fed by its predecessor and by op i/2, with names that need escapes and
// hold brackets that do not close.
func synthDoc(n int) string {
	var b strings.Builder
	b.WriteString(`{"format": "opplace-costed-graph/v1", "name": "synth", "ops": [`)
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		b.WriteString(synthOp(i))
	}
	b.WriteString("],\n \"edges\": [")
	for i := 1; i < n; i++ {
		if i > 1 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"from": "L%d/op\"{[%d\\", "to": "L%d/op\"{[%d\\"}`, (i-1)/7, i-1, i/7, i)
		if i%4 == 0 { // the same pair again, another tensor
			fmt.Fprintf(&b, `, {"from": "L%d/op\"{[%d\\", "tensor": "t\"}%d", "to": "L%d/op\"{[%d\\", "bytes": %d}`, (i-1)/7, i-1, i%3, i/7, i, 8+i%3)
		}
		if j := i / 2; j != i-1 {
			fmt.Fprintf(&b, `, {"from": "L%d/op\"{[%d\\", "to": "L%d/op\"{[%d\\", "bytes": 17}`, j/7, j, i/7, i)
		}
	}
	b.WriteString("]}\n")
	return b.String()
}

// synthOp is op i of synthDoc.
func synthOp(i int) string {
	dev := ""
	if i%3 == 1 {
		dev = fmt.Sprintf(`, "device": "gpu%d"`, i%4)
	}
	return fmt.Sprintf(`{"name": "L%d/op\"{[%d\\", "type": "MatMul", "times_ms": {"V100-16GB": %g, "T4": 1e-3}, "param_bytes": %d, "output_bytes": %d%s}`, i/7, i, 0.01+float64(i%13)/7, i%5*1024, 4096+i, dev)
}

// withWorkers runs f with parseWorkers set to n.
func withWorkers(n int, f func()) {
	old := parseWorkers
	parseWorkers = func() int { return n }
	defer func() { parseWorkers = old }()
	f()
}

// parseBoth parses in on one goroutine and on four.
func parseBoth(in string) (one, four *File, err1, err4 error) {
	one, err1 = parseV1With(strings.NewReader(in), "g.json", false)
	withWorkers(4, func() { four, err4 = parseV1(strings.NewReader(in), "g.json") })
	return
}

// TestParallelParse checks that the ops and edges parsed on several
// goroutines are the File parsed on one, field for field, and that a
// document with a problem anywhere gets the one-goroutine parser's
// message.
func TestParallelParse(t *testing.T) {
	valid := map[string]string{
		"batches":          synthDoc(3*batchItems + 17),
		"one op":           testDoc(testOpA, ""),
		"empty lists":      `{"format": "opplace-costed-graph/v1", "ops": [], "edges": []}`,
		"edges before ops": `{"edges": [{"from": "a", "to": "b"}], "format": "opplace-costed-graph/v1", "ops": [` + testOpA + `, {"name": "b", "times_ms": {"T4": 2}}]}`,
		"null edges":       `{"format": "opplace-costed-graph/v1", "ops": [` + testOpA + `], "edges": null}`,
		"duplicate names":  testDoc(testOpA+", "+testOpA, `{"from": "a", "to": "a"}`),
		"tensors, devices": testDoc(testOpA+`, {"name": "b", "device": "gpu1", "times_ms": {"T4": 2}}`, `{"from": "a", "to": "b", "tensor": "h"}, {"from": "a", "to": "b", "tensor": "h"}`),
	}
	for _, name := range []string{"tiny.json", "mlp_train.json", "bert24_layers_training.json"} {
		valid[name] = string(mustRead(t, "../testdata/costed/"+name))
	}
	for name, in := range valid {
		one, four, err1, err4 := parseBoth(in)
		if err1 != nil || err4 != nil {
			t.Errorf("%s: %v / %v", name, err1, err4)
			continue
		}
		if !reflect.DeepEqual(one, four) {
			t.Errorf("%s: the File parsed on four goroutines differs from one goroutine's", name)
		}
		// And it was parsed so, not read again on one goroutine.
		withWorkers(4, func() {
			if _, err := parseV1With(strings.NewReader(in), "g.json", true); err != nil {
				t.Errorf("%s: not parsed on several goroutines: %v", name, err)
			}
		})
	}
	big := synthDoc(2*batchItems + 5)
	at := func(marker string) int {
		i := strings.Index(big, marker)
		if i < 0 {
			t.Fatalf("no %q in the document", marker)
		}
		return i
	}
	lateOp := synthOp(2*batchItems + 1) // param_bytes 0
	late := at(lateOp)
	edge := at(`{"from": "L1000/`)
	broken := map[string]string{
		"syntax error in the last batch": big[:late] + `,` + big[late:],
		"type error in the last batch":   strings.Replace(big, lateOp, strings.Replace(lateOp, `"param_bytes": 0`, `"param_bytes": "x"`, 1), 1),
		"two errors, the first early":    strings.Replace(big[:late]+`]`+big[late+1:], synthOp(99), strings.Replace(synthOp(99), `"type"`, `"kind"`, 1), 1),
		"truncated inside an op":         big[:late+30],
		"truncated inside the edges":     big[:edge+20],
		"unknown field in an edge":       big[:edge] + `{"fro": 1}, ` + big[edge:],
		"a tensor name that is a number": strings.Replace(big, `"tensor": "t`, `"tensor": 7, "x": "t`, 1),
		"a device that is an object":     strings.Replace(big, `"device": "gpu`, `"device": {}, "x": "gpu`, 1),
		"an op that is not an object":    strings.Replace(big, `"ops": [`, `"ops": [1, `, 1),
		"unbalanced brackets in an op":   strings.Replace(big, lateOp, strings.Replace(lateOp, `1e-3}`, `1e-3]`, 1), 1),
		"trailing comma in the ops":      strings.Replace(big, "],\n \"edges\"", ",],\n \"edges\"", 1),
		"ops null":                       `{"format": "opplace-costed-graph/v1", "ops": null}`,
		"garbage after the document":     big + "x",
	}
	for name, in := range broken {
		if in == big {
			t.Fatalf("%s: the document was not changed", name)
		}
		_, _, err1, err4 := parseBoth(in)
		if err1 == nil && name != "ops null" {
			t.Errorf("%s: parsed without an error", name)
			continue
		}
		if fmt.Sprint(err1) != fmt.Sprint(err4) {
			t.Errorf("%s: one goroutine: %v\nfour: %v", name, err1, err4)
		}
	}
}

// FuzzParallelParse checks that parsing on several goroutines gives the
// one-goroutine parser's File or its error, whatever the input.
func FuzzParallelParse(f *testing.F) {
	f.Add([]byte(synthDoc(40)))
	f.Add([]byte(testDoc(testOpA+`, {"name": "b", "times_ms": {"T4": null}}`, `{"from": "a", "to": "b", "bytes": 3}`)))
	f.Add([]byte(testDoc(testOpA+`, {"name": "b", "device": "gpu1", "times_ms": {"T4": 2}}`, `{"from": "a", "to": "b", "tensor": "h"}, {"from": "a", "to": "b", "tensor": "c", "bytes": 3}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		one, err1 := parseV1With(bytes.NewReader(data), "f.json", false)
		var four *File
		var err4 error
		old := parseWorkers
		parseWorkers = func() int { return 3 }
		four, err4 = parseV1(bytes.NewReader(data), "f.json")
		parseWorkers = old
		if fmt.Sprint(err1) != fmt.Sprint(err4) {
			t.Fatalf("one goroutine: %v\nthree: %v", err1, err4)
		}
		if err1 == nil && !reflect.DeepEqual(one, four) {
			t.Fatalf("the File parsed on three goroutines differs")
		}
	})
}

// TestLineCuts checks documents whose elements look like lines of their
// own but are not, or are with something wrong: the parse on several
// goroutines, which cuts such elements at line ends, gives the File or
// the message the one-goroutine parse gives.
func TestLineCuts(t *testing.T) {
	lines := func(ops ...string) string {
		return "{\"format\": \"opplace-costed-graph/v1\", \"ops\": [\n" + strings.Join(ops, "\n") + "\n]}\n"
	}
	var many []string
	for i := range 3*batchItems + 5 {
		many = append(many, synthOp(i)+",")
	}
	last := synthOp(3*batchItems + 5)
	docs := map[string]string{
		"one a line":           lines(append(many, last)...),
		"the list ends a line": lines(append(many, last+"]}")...),
		"an element goes on":   lines(append(many, `{"name": "x", "times_ms": {"T4": 1}, "colour": [{"a": 1}`, `]},`, last)...),
		"two on a line":        lines(append(many, `{"name": "x", "times_ms": {"T4": 1}}, {"name": "y", "times_ms": {"T4": 1}},`, last)...),
		"two, no space":        lines(append(many, `{"name": "x", "times_ms": {"T4": 1}},{"name": "y", "times_ms": {"T4": 1}},`, last)...),
		"a trailing comma":     lines(append(many, last+",")...),
		"a bad time":           lines(append(many, `{"name": "x", "times_ms": {"T4": "1"}},`, last)...),
		"CRLF":                 strings.ReplaceAll(lines(append(many, last)...), "\n", "\r\n"),
	}
	for name, in := range docs {
		one, four, err1, err4 := parseBoth(in)
		if fmt.Sprint(err1) != fmt.Sprint(err4) {
			t.Errorf("%s: one goroutine: %v\nfour: %v", name, err1, err4)
			continue
		}
		if err1 == nil && !reflect.DeepEqual(one, four) {
			t.Errorf("%s: the File parsed on four goroutines differs from one goroutine's", name)
		}
	}
}
