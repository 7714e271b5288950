package profile_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/opplace/opplace/profile"
)

// FuzzParse checks that no profile file makes Parse panic, and that
// whatever it accepts holds finite, ordered times and survives a write
// and a re-read unchanged. Run it with
//
//	go test ./profile -run '^$' -fuzz FuzzParse -fuzztime 10m
func FuzzParse(f *testing.F) {
	for _, name := range []string{"../testdata/bad/profile-syntax.json", "../testdata/bad/profile-negative-time.json"} {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	g := tiny(f)
	p := &profile.Profile{Format: profile.FormatVersion, Source: "test", DeviceTypes: []profile.DeviceType{testCPU},
		Ops: []profile.Measurement{{Name: "relu", Key: profile.OpKey(g, 1), DeviceType: "test-cpu", MedianMS: 0.5, P10MS: 0.4, P90MS: 0.7, Runs: 9}}}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := profile.Parse("fuzz.json", data)
		if err != nil {
			return
		}
		checkProfile(t, p)
		var buf bytes.Buffer
		if err := p.Write(&buf); err != nil {
			t.Fatalf("an accepted profile does not write: %v", err)
		}
		q, err := profile.Parse("again.json", buf.Bytes())
		if err != nil {
			t.Fatalf("a written profile does not read back: %v", err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the profile:\n%+v\n%+v", p, q)
		}
	})
}

// FuzzImport checks that no trace makes ImportBytes panic, and that a
// profile it makes from one is valid: finite times, p10 <= median <= p90,
// and a file Parse accepts. Run it with
//
//	go test ./profile -run '^$' -fuzz FuzzImport -fuzztime 10m
func FuzzImport(f *testing.F) {
	for _, name := range []string{"resnet50_b1_onnxruntime_cpu.json", "bert_base_b1_pytorch_v100.json", "resnet50_b1_ort130_cpu.json", "resnet50_b1_pytorch113_cpu.json"} {
		data, err := os.ReadFile(filepath.Join(samples, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(traceHead(f, data, 12))
	}
	f.Add([]byte(`[{"cat":"Node","name":"relu_kernel_time","ph":"X","dur":10,"args":{"op_name":"Relu"}},
{"cat":"Node","name":"relu_kernel_time","ph":"X","dur":30}]`))
	f.Add([]byte(`{"traceEvents":[{"cat":"gpu_user_annotation","name":"relu","ph":"X","dur":4},{"cat":"user_annotation","name":"relu","ph":"X","dur":9}]}`))
	f.Add([]byte(`[{"name":"model_run","ph":"X","ts":0,"dur":100,"tid":1},{"name":"aten::matmul","ph":"X","ts":1,"dur":10,"tid":1},
{"name":"aten::relu_","ph":"X","ts":20,"dur":3,"tid":1},{"name":"aten::erf","ph":"X","ts":30,"dur":3,"tid":1},{"name":"aten::softmax","ph":"X","ts":40,"dur":3,"tid":1}]`))
	g := tiny(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := profile.ImportBytes("fuzz.json", data, g, testCPU)
		if err != nil {
			return
		}
		if res.Matched > res.Events {
			t.Fatalf("%d events matched of %d", res.Matched, res.Events)
		}
		if !(res.MatchedShare >= 0 && res.MatchedShare <= 1+1e-9) || res.MatchedMS > res.TraceMS+1e-6 {
			t.Fatalf("matched %v ms (share %v) of %v ms", res.MatchedMS, res.MatchedShare, res.TraceMS)
		}
		checkProfile(t, res.Profile)
		var buf bytes.Buffer
		if err := res.Profile.Write(&buf); err != nil {
			t.Fatalf("an imported profile does not write: %v", err)
		}
		if _, err := profile.Parse("imported.json", buf.Bytes()); err != nil {
			t.Fatalf("an imported profile does not read back: %v", err)
		}
	})
}

// traceHead is a trace of the first n events of a trace file (a JSON
// array, or an object with traceEvents) in the same form. Whole sample
// files are hundreds of kilobytes, and cut at a byte offset they are
// not JSON: a few whole events keep each format's shape and are quick
// to mutate.
func traceHead(f *testing.F, data []byte, n int) []byte {
	var events []json.RawMessage
	if err := json.Unmarshal(data, &events); err == nil {
		out, err := json.Marshal(events[:min(n, len(events))])
		if err != nil {
			f.Fatal(err)
		}
		return out
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		f.Fatal(err)
	}
	if err := json.Unmarshal(obj["traceEvents"], &events); err != nil {
		f.Fatal(err)
	}
	head, err := json.Marshal(events[:min(n, len(events))])
	if err != nil {
		f.Fatal(err)
	}
	obj["traceEvents"] = head
	out, err := json.Marshal(obj)
	if err != nil {
		f.Fatal(err)
	}
	return out
}

func checkProfile(t *testing.T, p *profile.Profile) {
	t.Helper()
	for _, m := range p.Ops {
		for _, v := range []float64{m.MedianMS, m.P10MS, m.P90MS} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("measurement %+v has a time that is not a finite non-negative number", m)
			}
		}
	}
}
