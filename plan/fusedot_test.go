package plan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph/graphtest"
)

func TestWriteFusedDOT(t *testing.T) {
	g := graphtest.New("g").Input("x", 4).Op("conv", 10, 4, "x").Op("relu", 1, 4, "conv").Op("pool", 1, 4, "relu").Output("pool").G
	p := &Plan{
		Devices: []Device{{Name: "d0"}, {Name: "d1"}},
		Ops:     []Op{{Name: "conv", Device: "d0"}, {Name: "relu", Device: "d0"}, {Name: "pool", Device: "d1"}},
	}
	var b bytes.Buffer
	if err := WriteFusedDOT(&b, p, g, [][]string{{"conv+relu", "conv", "relu"}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Count(out, "{") != strings.Count(out, "}") {
		t.Fatalf("unbalanced braces:\n%s", out)
	}
	start := strings.Index(out, `subgraph "cluster_fused_0"`)
	dev1 := strings.Index(out, `subgraph "cluster_1"`)
	if start < 0 || !(start < strings.Index(out, `"conv" [`) && strings.Index(out, `"relu" [`) < dev1) || !strings.Contains(out, `label="fused: conv+relu"`) {
		t.Errorf("fused group not drawn inside d0's cluster:\n%s", out)
	}
	if strings.Index(out, `"pool" [`) < dev1 {
		t.Errorf("pool left its device cluster:\n%s", out)
	}
}
