package pipeline_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// chainFile writes a costed graph of n ops in one chain (each reads the
// one before it; 10 µs on a V100, 4 KiB out): forward only, with no
// module paths, the shape of a long unrolled loop.
func chainFile(b *testing.B, dir string, n int) string {
	b.Helper()
	path := filepath.Join(dir, fmt.Sprintf("chain%d.json", n))
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, `{"format": "opplace-costed-graph/v1", "name": "chain", "ops": [`)
	for i := range n {
		if i > 0 {
			w.WriteString(",\n")
		}
		fmt.Fprintf(w, `{"name": "op%d", "type": "MatMul", "times_ms": {"V100-16GB": 0.01}, "output_bytes": 4096}`, i)
	}
	w.WriteString("],\n\"edges\": [")
	for i := 1; i < n; i++ {
		if i > 1 {
			w.WriteString(",\n")
		}
		fmt.Fprintf(w, `{"from": "op%d", "to": "op%d"}`, i-1, i)
	}
	w.WriteString("]}\n")
	if err := errors.Join(w.Flush(), out.Close()); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkChain is `opplace plan` (auto) of a 200,000-op costed chain on
// 4xV100 as a user runs it: bin/opplace (make build) in a child process.
// Every strategy meets the whole chain (the pipelines simulate it at up
// to four micro-batches, 800,000 op runs), so it guards the simulator's
// and the partitioners' cost per op. It reports the wall time (ns/op)
// and the child's peak resident memory (peak_rss_MB).
//
//	go test -run '^$' -bench Chain -benchtime 3x ./pipeline/
func BenchmarkChain(b *testing.B) {
	bin := builtBinary(b)
	dir := b.TempDir()
	file := chainFile(b, dir, 200_000)
	var peak int64
	b.ResetTimer()
	for b.Loop() {
		cmd := exec.Command(bin, "plan", file, "--cluster", filepath.Join(clusters, "4xV100.yaml"), "-q", "--out", filepath.Join(dir, "plan.json"))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", cmd, err, out)
		}
		peak = max(peak, peakRSS(cmd.ProcessState))
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MB")
}

// builtBinary is bin/opplace (make build), for benchmarks that run the
// command as a user does; it skips the benchmark when it is missing.
func builtBinary(b *testing.B) string {
	b.Helper()
	bin, err := filepath.Abs("../bin/opplace")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		b.Skip("bin/opplace is missing: run make build first")
	}
	return bin
}

// peakRSS is a finished child's peak resident memory in bytes
// (getrusage's ru_maxrss: the whole process), 0 where unknown.
func peakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024 // kilobytes on Linux
	}
	return 0
}
