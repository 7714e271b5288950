package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLLMFeasibility: a 7.5B GPT at the global batch of 128 under
// amp-bf16 is no proven misfit on 8 × A100-40GB (the whole batch's
// softmax gradient, 192 GiB, is no bound: a plan runs it at a
// micro-batch), so dp's failure exits 3 saying that no bound rules a plan
// out; on 2 × A100-40GB its parameters and optimizer state alone (86 GiB)
// overflow the cluster, and auto exits 3 with the proof.
func TestLLMFeasibility(t *testing.T) {
	if testing.Short() {
		t.Skip("plans a 7.5B GPT")
	}
	model := filepath.Join("../../../shared/models/llm", "megatron_7.5b.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("shared model absent: %v", err)
	}
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
		{"8 x A100-40GB, dp", filepath.Join(clusterDir, "8xA100-40GB.yaml"), []string{"--strategy", "dp"},
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
