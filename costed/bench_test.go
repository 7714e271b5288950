package costed_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/costed/costedtest"
)

// synthJSON is a generated costed graph of n ops as its JSON file.
func synthJSON(b *testing.B, n int) []byte {
	b.Helper()
	f, err := costedtest.Generate(costedtest.Config{Ops: n, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := f.Encode(&buf); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkDecode is the costed-JSON import (parse, check, build the graph
// and its costs) of generated graphs of 10^4 and 10^5 ops, and of 10^6
// when OPPLACE_BENCH_1M is set; MB/s is of the JSON, ops/s of its ops.
//
//	go test -run '^$' -bench Decode -benchtime 3x ./costed/
func BenchmarkDecode(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if os.Getenv("OPPLACE_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			data := synthJSON(b, n)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := costed.Decode(data, "synth.json"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkLoad is Load (the import the command line does, streaming
// from the file) of the costed graph named by OPPLACE_COSTED_FILE, with
// the collector off as in the command's import stage (GOGC set leaves it
// on); MB/s is of the file, ops/s of its ops.
//
//	OPPLACE_COSTED_FILE=/tmp/ir6.json go test -run '^$' -bench Load -benchtime 3x ./costed/
func BenchmarkLoad(b *testing.B) {
	path := os.Getenv("OPPLACE_COSTED_FILE")
	if path == "" {
		b.Skip("OPPLACE_COSTED_FILE not set")
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	n := 0
	for i := 0; i < b.N; i++ {
		runtime.GC()
		b.StartTimer()
		old := 100
		if os.Getenv("GOGC") == "" {
			old = debug.SetGCPercent(-1)
		}
		m, err := costed.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		debug.SetGCPercent(old)
		b.StopTimer()
		n += len(m.Graph.Ops)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "ops/s")
}
