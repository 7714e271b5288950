// Command synth writes a synthetic costed graph
// (opplace-costed-graph/v1) of any size to stdout, deterministic from a
// seed, so anyone can reproduce opplace's benchmarks:
//
//	go run ./internal/synth -ops 1000000 > /tmp/big.json
//	bin/opplace plan /tmp/big.json --cluster testdata/clusters/4xV100.yaml --strategy m-etf
//
// -shape picks the graph, both described in package costed/costedtest:
//
//   - transformer (the default): a transformer's training step
//     (costedtest.Generate), with -heads, -param-bytes and
//     -activation-bytes;
//
//   - layered: a random layered DAG (costedtest.Layered) of -width ops
//     per layer (default 6), each fed by 1 to 3 ops of the layer before
//     and now and then by a skip connection, op times lognormal around
//     240 µs (sigma 0.5 of the logarithm), 1 to 64 MiB of parameters and
//     1 to 32 MiB of output per op, timed for the device type SynthGPU
//     of testdata/clusters/{4,8}xSynth*.yaml (-device-type names another):
//
//     go run ./internal/synth -shape layered -ops 300 -seed 1 > /tmp/l300.json
//     bin/opplace compare /tmp/l300.json --cluster testdata/clusters/4xSynth-tight.yaml
//
//   - wide: the layered DAG with as many ops per layer as layers (-width
//     defaults to the square root of -ops: 1,000 for 10^6 ops), so a list
//     placer holds about a thousand ready ops at every step where the
//     layered default holds six:
//
//     go run ./internal/synth -shape wide -ops 1000000 > /tmp/w1m.json
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/opplace/opplace/costed"
	"github.com/opplace/opplace/costed/costedtest"
)

func main() {
	var cfg costedtest.Config
	var shape, deviceType string
	var width int
	flag.StringVar(&shape, "shape", "transformer", "graph shape: transformer, layered or wide")
	flag.IntVar(&cfg.Ops, "ops", 10000, "number of ops (exact)")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "random seed: one seed, one graph")
	flag.IntVar(&cfg.Heads, "heads", 4, "transformer: parallel attention ops per layer")
	flag.Int64Var(&cfg.ParamBytes, "param-bytes", 1<<30, "transformer: total weight bytes")
	flag.Int64Var(&cfg.ActivationBytes, "activation-bytes", 2<<30, "transformer: total forward activation bytes")
	flag.IntVar(&width, "width", 0, fmt.Sprintf("layered and wide: ops per layer (default %d for layered, the square root of -ops for wide)", costedtest.LayeredWidth))
	flag.StringVar(&deviceType, "device-type", costedtest.LayeredDeviceType, "layered: the device type the times are for")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "synth: unexpected argument %q; the graph goes to stdout\n", flag.Arg(0))
		os.Exit(2)
	}
	var f *costed.File
	var err error
	switch shape {
	case "transformer":
		f, err = costedtest.Generate(cfg)
	case "layered", "wide":
		if width <= 0 && shape == "wide" {
			width = max(1, int(math.Sqrt(float64(cfg.Ops))))
		}
		f, err = costedtest.Layered(costedtest.LayeredConfig{Ops: cfg.Ops, Width: width, Seed: cfg.Seed, DeviceType: deviceType})
	default:
		err = fmt.Errorf("-shape %q: want transformer, layered or wide", shape)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "synth:", err)
		os.Exit(2)
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	err = f.Encode(w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "synth:", err)
		os.Exit(1)
	}
}
