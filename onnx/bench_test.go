package onnx

import (
	"os"
	"testing"
)

// BenchmarkLoad imports each shared model from memory (decoding, graph
// building and shape inference).
func BenchmarkLoad(b *testing.B) {
	for _, tc := range modelCases {
		data, err := os.ReadFile(modelPath(tc.name))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var ops int
			for b.Loop() {
				m, err := Decode(data, tc.name, tc.opts)
				if err != nil {
					b.Fatal(err)
				}
				ops = len(m.Graph.Ops)
			}
			b.ReportMetric(float64(ops), "ops/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ops), "ns/node")
		})
	}
}
