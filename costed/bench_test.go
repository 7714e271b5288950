package costed_test

import (
	"bytes"
	"fmt"
	"os"
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
