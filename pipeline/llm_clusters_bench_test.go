package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dgxCluster writes a cluster of n GPUs of one type in DGX-class hosts:
// eight on NVSwitch per host (preset), 8 × 200 Gb/s of InfiniBand per
// host (as selene-1536xA100.yaml), written with count: as users write
// them.
func dgxCluster(b *testing.B, dir, typ, preset string, n int) string {
	b.Helper()
	var y strings.Builder
	fmt.Fprintf(&y, "name: %dx%s\nnetwork: {kind: network, bandwidth: 1600Gb/s, latency: 5us}\nhosts:\n", n, typ)
	for h := range n / 8 {
		fmt.Fprintf(&y, "  - {name: node%d, intra: {preset: %s}}\n", h, preset)
	}
	y.WriteString("devices:\n")
	for h := range n / 8 {
		fmt.Fprintf(&y, "  - {name: \"n%dgpu{i}\", count: 8, type: %s, host: node%d}\n", h, typ, h)
	}
	path := filepath.Join(dir, fmt.Sprintf("%dx%s.yaml", n, typ))
	if err := os.WriteFile(path, []byte(y.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// llmRows are the LLM training runs the issue on planning at scale
// measures: Megatron-LM's Table 1 (model, A100-80GB GPUs, global batch;
// ../shared/models/llm/README.md), Llama 2 70B on H100s, and one model
// over a growing cluster.
var llmRows = []struct {
	model string
	typ   string
	gpus  int
	batch int
}{
	{"megatron_1.7b", "A100-80GB", 32, 512},
	{"megatron_3.6b", "A100-80GB", 64, 512},
	{"megatron_7.5b", "A100-80GB", 128, 512},
	{"megatron_18.4b", "A100-80GB", 256, 1024},
	{"megatron_145b", "A100-80GB", 1536, 2304},
	{"llama2_70b", "H100-80GB", 64, 512},
	{"llama2_70b", "H100-80GB", 512, 512},
	// The growth curve: one model, 8 to 1,024 GPUs.
	{"megatron_1.7b", "A100-80GB", 8, 512},
	{"megatron_1.7b", "A100-80GB", 16, 512},
	{"megatron_1.7b", "A100-80GB", 64, 512},
	{"megatron_1.7b", "A100-80GB", 128, 512},
	{"megatron_1.7b", "A100-80GB", 256, 512},
	{"megatron_1.7b", "A100-80GB", 512, 512},
	{"megatron_1.7b", "A100-80GB", 1024, 1024},
}

// BenchmarkLLMClusters is `opplace plan` (auto, amp-bf16) of the shared
// decoder LLMs on clusters of 8 to 1,536 GPUs, as a user runs it:
// bin/opplace (make build) in a child process, killed past
// OPPLACE_BENCH_LIMIT (default 60s; such a row is logged, not failed). Per row it reports the wall time (ns/op), the child's CPU
// time (cpu_s) and peak resident memory (peak_rss_MB), and logs the
// plan's strategy and predicted step. Set OPPLACE_BENCH_ROWS to a
// substring of "model/gpus" to run some rows only.
//
//	go test -run '^$' -bench LLMClusters -benchtime 1x -v ./pipeline/
func BenchmarkLLMClusters(b *testing.B) {
	bin := builtBinary(b)
	if _, err := os.Stat(llmModels); err != nil {
		b.Skip("the shared LLMs are missing: ", err)
	}
	limit := 60 * time.Second
	if s := os.Getenv("OPPLACE_BENCH_LIMIT"); s != "" {
		var err error
		if limit, err = time.ParseDuration(s); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	for _, row := range llmRows {
		name := fmt.Sprintf("%s/%d", row.model, row.gpus)
		if f := os.Getenv("OPPLACE_BENCH_ROWS"); f != "" && !strings.Contains(name, f) {
			continue
		}
		b.Run(name, func(b *testing.B) {
			preset := "nvswitch-a100"
			if strings.HasPrefix(row.typ, "H100") {
				preset = "nvswitch-h100"
			}
			c := dgxCluster(b, dir, row.typ, preset, row.gpus)
			out := filepath.Join(dir, "plan.json")
			var cpu time.Duration
			var peak int64
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), limit)
				cmd := exec.CommandContext(ctx, bin, "plan", filepath.Join(llmModels, row.model+".onnx"),
					"--cluster", c, "--precision", "amp-bf16", "--dim", fmt.Sprintf("batch=%d", row.batch), "-q", "--out", out, "-o", "table")
				table, err := cmd.Output()
				timedOut := ctx.Err() == context.DeadlineExceeded // before cancel sets Err
				cancel()
				peak = max(peak, peakRSS(cmd.ProcessState))
				cpu = max(cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
				if timedOut {
					b.Logf("no plan within %v", limit)
					continue
				}
				if err != nil {
					b.Fatalf("%v: %v\n%s", cmd, err, table)
				}
				for _, line := range strings.Split(string(table), "\n") {
					if strings.HasPrefix(line, "strategy:") || strings.HasPrefix(line, "step:") || strings.HasPrefix(line, "stages:") {
						b.Log(line)
					}
				}
			}
			b.ReportMetric(cpu.Seconds(), "cpu_s")
			b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MB")
		})
	}
}
