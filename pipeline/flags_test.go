package pipeline_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLibraryNamesNoFlags: library packages serve Go programs as well as
// the CLI, and a flag's name changes with the CLI (--micro-batches was
// never the flag's name), so their messages say what to change ("the
// micro-batch count", onnx.Options.Knobs), and only cmd/opplace names
// flags.
func TestLibraryNamesNoFlags(t *testing.T) {
	flag := regexp.MustCompile(`(^|[\s(])--[a-z][a-z-]*`)
	// allowed is what looks like a flag and is not one of ours, cut out
	// before the check: another tool's flag (the command that converts a
	// TF.js layers model into the graph model tf reads; Megatron-LM's
	// arguments, which export's megatron target writes and explains, and
	// torchrun's, which its launch commands use) and
	// the CSS custom properties of the report's stylesheet.
	allowed := regexp.MustCompile(`tensorflowjs_converter --output_format|var\(--[a-z-]+\)|--(use-distributed-optimizer|global-batch-size|num-layers|ckpt-format|bf16|fp16|sequence-parallel)\b|--(nnodes|node-rank|nproc-per-node|master-addr|master-port)\b`)
	for _, dir := range []string{".", "../partition", "../placer", "../strategy", "../cost", "../profile", "../graph", "../sim",
		"../onnx", "../tf", "../report", "../view", "../plan", "../costed", "../cluster", "../export", "../profile/driver",
		"../internal/importopt", "../internal/tfdevice", "../replan"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && flag.MatchString(allowed.ReplaceAllString(lit.Value, "")) {
					t.Errorf("%s: a message names a command-line flag: %s", fset.Position(lit.Pos()), lit.Value)
				}
				return true
			})
		}
	}
}
