package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLLMFeasibility: a 7.5B GPT at the global batch of 128 under
// amp-bf16 is no proven misfit on 8 × A100-40GB (the whole batch's
// softmax gradient, 192 GiB, is no bound: a plan runs it at a
// micro-batch), so dp's failure under ZeRO-2 exits 3 saying that no
// bound rules a plan out (under ZeRO-3 dp fits: TestZeRO3FitsLLM); on
// 2 × A100-40GB its parameters and optimizer state alone (86 GiB)
// overflow the cluster, and auto exits 3 with the proof.
func TestLLMFeasibility(t *testing.T) {
	model := sharedLLM(t, "megatron_7.5b")
	two := filepath.Join(t.TempDir(), "2xA100-40GB.yaml")
	doc := "name: 2xA100-40GB\nhosts:\n  - {name: node0}\ndevices:\n  - {name: \"gpu{i}\", count: 2, type: A100-40GB, host: node0}\nlinks:\n  - {between: [gpu0, gpu1], preset: nvswitch-a100}\n"
	if err := os.WriteFile(two, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cluster string
		extra         []string
		want, not     string
	}{
		{"8 x A100-40GB, dp", filepath.Join(clusterDir, "8xA100-40GB.yaml"), []string{"--strategy", "dp", "--zero", "zero2"},
			"strategy dp found no plan that fits the cluster's memory, though no bound rules one out", "does not fit the cluster"},
		{"2 x A100-40GB, auto", two, nil, "the model does not fit the cluster: a plan needs at least 86.", "no bound rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"plan", model, "--dim", "batch=128", "--precision", "amp-bf16", "--cluster", tc.cluster, "-o", "table"}, tc.extra...)
			code, stdout, stderr := invoke(t, args...)
			if code != exitInfeasible || stdout != "" || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, tc.not) {
				t.Errorf("exit %d, stdout %d bytes; want %d with %q and without %q:\n%s", code, len(stdout), exitInfeasible, tc.want, tc.not, stderr)
			}
			if !strings.Contains(stderr, "at one sample of the batch of 128 per micro-batch") {
				t.Errorf("the bound does not say where it is taken:\n%s", stderr)
			}
		})
	}
}

// TestZeRO3FitsLLM: the 7.5B GPT at batch 128 under amp-bf16 that dp
// cannot fit on 8 × A100-40GB under ZeRO-2 (TestLLMFeasibility) fits
// under ZeRO-3 (FSDP FULL_SHARD), the configuration 7B models train with
// on one node: each replica keeps 1/8 of the weights, gradients and
// optimizer state, and gathers one transformer block's weights at a
// time.
func TestZeRO3FitsLLM(t *testing.T) {
	model := sharedLLM(t, "megatron_7.5b")
	code, stdout, stderr := invoke(t, "plan", model, "--dim", "batch=128", "--precision", "amp-bf16",
		"--cluster", filepath.Join(clusterDir, "8xA100-40GB.yaml"), "--strategy", "dp", "--zero", "zero3", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p struct {
		Fits   bool `json:"fits"`
		Stages []struct {
			Sharding       string `json:"sharding"`
			Replicas       int    `json:"replicas"`
			MicroBatchSize int64  `json:"micro_batch_size"`
		} `json:"stages"`
		MicroBatches int `json:"micro_batches"`
		Devices      []struct {
			Peak     int64 `json:"peak_memory_bytes"`
			Capacity int64 `json:"memory_bytes"`
		} `json:"devices"`
		AllReduces []struct {
			Kind string `json:"kind"`
		} `json:"all_reduces"`
	}
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if !p.Fits || len(p.Stages) != 1 || p.Stages[0].Sharding != "zero3" || p.Stages[0].Replicas != 8 {
		t.Fatalf("fits %v, stages %+v: want one ZeRO-3 stage of 8 replicas that fits", p.Fits, p.Stages)
	}
	if got := p.Stages[0].MicroBatchSize * int64(max(p.MicroBatches, 1)) * 8; got != 128 {
		t.Errorf("micro-batch size %d x %d micro-batches x 8 replicas = %d, want the batch of 128", p.Stages[0].MicroBatchSize, p.MicroBatches, got)
	}
	for i, d := range p.Devices {
		if d.Peak > d.Capacity || d.Peak < d.Capacity/2 {
			t.Errorf("device %d peaks at %d bytes of %d: want a plan that uses the device and fits it", i, d.Peak, d.Capacity)
		}
	}
	kinds := map[string]int{}
	for _, a := range p.AllReduces {
		kinds[a.Kind]++
	}
	if kinds["all-gather"] == 0 || kinds["reduce-scatter"] == 0 || kinds["all-reduce"] != 0 {
		t.Errorf("collectives %v: want the blocks' all-gathers and reduce-scatters only", kinds)
	}
}

// sharedLLM is the path of the shared decoder LLM name
// (../shared/models/llm), skipping the test in short mode, where a plan of
// it is too slow, and when the file is absent.
func sharedLLM(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("plans %s", name)
	}
	model := filepath.Join("../../../shared/models/llm", name+".onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("shared model absent: %v", err)
	}
	return model
}
