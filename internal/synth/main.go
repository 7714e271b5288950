// Command synth writes a synthetic costed training graph
// (opplace-costed-graph/v1) of any size to stdout, deterministic from a
// seed, so anyone can reproduce opplace's scale benchmarks:
//
//	go run ./internal/synth -ops 1000000 > /tmp/big.json
//	bin/opplace plan /tmp/big.json --cluster testdata/clusters/4xV100.yaml --strategy m-etf
//
// The graph is described in package costed/costedtest.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/opplace/opplace/costed/costedtest"
)

func main() {
	var cfg costedtest.Config
	flag.IntVar(&cfg.Ops, "ops", 10000, "number of ops (exact)")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "random seed: one seed, one graph")
	flag.IntVar(&cfg.Heads, "heads", 4, "parallel attention ops per layer")
	flag.Int64Var(&cfg.ParamBytes, "param-bytes", 1<<30, "total weight bytes")
	flag.Int64Var(&cfg.ActivationBytes, "activation-bytes", 2<<30, "total forward activation bytes")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "synth: unexpected argument %q; the graph goes to stdout\n", flag.Arg(0))
		os.Exit(2)
	}
	f, err := costedtest.Generate(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "synth:", err)
		os.Exit(2)
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	if err := f.Encode(w); err == nil {
		err = w.Flush()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "synth:", err)
		os.Exit(1)
	}
}
