package tf

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/importopt"
	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	"google.golang.org/protobuf/encoding/prototext"
)

// concatAxes is n ConcatV2 of a rank-r tensor on axis constants whose
// values the graph lacks: each is guessed by trying every axis with a
// strict inference run, the slow input class fuzzing found (n=40, r=254:
// 10,161 inference passes and 3 minutes before settle had a budget).
func concatAxes(n, r int) string {
	dims := make([]int64, r)
	for i := range dims {
		dims[i] = 1
	}
	var b strings.Builder
	b.WriteString(ph("x", dims...))
	prev := "x"
	for i := range n {
		b.WriteString(ci(fmt.Sprintf("ax%d", i), nil))
		b.WriteString(nd(fmt.Sprintf("c%d", i), "ConcatV2", in(prev, prev, fmt.Sprintf("ax%d", i)), aI("N", 2)))
		prev = fmt.Sprintf("c%d", i)
	}
	return b.String()
}

// slowSeeds are the fuzz seeds of the slow inputs, kept in
// testdata/fuzz/FuzzDecode (written by -update).
var slowSeeds = map[string]string{
	"slow-concat-axes-rank254": concatAxes(40, 254),
	"slow-concat-axes-rank64":  concatAxes(64, 64),
}

// TestSlowInputs checks that settling unknown shapes stays within its
// budget of inference passes, with a warning, and that the seeds on disk
// are these graphs.
func TestSlowInputs(t *testing.T) {
	for name, text := range slowSeeds {
		path := filepath.Join("testdata", "fuzz", "FuzzDecode", name)
		seed := "go test fuzz v1\n[]byte(" + strconv.Quote(text) + ")\n"
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(seed), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != seed {
			t.Errorf("%s: the seed on disk differs (err %v); rewrite it with go test ./tf -run TestSlowInputs -update", path, err)
		}
		gd := &graphpb.GraphDef{}
		if err := prototext.Unmarshal([]byte(text), gd); err != nil {
			t.Fatal(err)
		}
		c := newConverter(name, Options{Import: importopt.Options{Batch: 1}}, nil)
		if _, err := c.convert(gd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// A strict run started within budget may finish its passes.
		if limit := settleBudget + 2*(maxPasses+1); c.passes > limit {
			t.Errorf("%s: %d inference passes, want at most %d", name, c.passes, limit)
		}
		if w := c.finishWarnings(); !strings.Contains(strings.Join(w, "\n"), "shape recovery stopped after 128 inference passes") {
			t.Errorf("%s: warnings %q lack the budget's", name, w)
		}
	}
}

// TestValueStringLinear checks a shape prints in allocations independent
// of its rank (it concatenated strings, quadratic in the rank, and guesses
// compared shapes by their text).
func TestValueStringLinear(t *testing.T) {
	v := partial(0, maxRank)
	if a := testing.AllocsPerRun(10, func() { _ = v.String() }); a > 8 {
		t.Errorf("String of a rank-%d shape: %v allocations, want at most 8", maxRank, a)
	}
}
