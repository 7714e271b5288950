package cbc

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"
)

// Cbc checks its time limit between branch-and-bound nodes, and not inside
// the root LP, its preprocessing or its heuristics: a big-M placement
// model whose root LP is slow ran for more than ten minutes under a limit
// of 2 s (measured on the ilp placer, GPT-2 XL and a memory-bound
// GPT-2 small). A thread inside C cannot be stopped from Go, so a large
// solve with a limit (apartNonzeros) runs in a child process, a copy of
// this executable, and is killed when it overruns.

// childEnv marks a process that Solve started to run one solve: the
// problem arrives gob-encoded on stdin and the solution leaves on file
// descriptor 3 (stdout is left to whatever the solver prints).
const childEnv = "OPPLACE_CBC_CHILD"

func init() {
	if os.Getenv(childEnv) != "" {
		os.Exit(serveChild())
	}
}

// overrunGrace is how long past its limit a solve may run before it is
// killed: Cbc finishes the node it is in, and the child needs to start
// and exchange the problem (tens of milliseconds).
var overrunGrace = func(limit float64) time.Duration {
	return time.Duration((0.5*limit + 1) * float64(time.Second))
}

// errNoChild says no child process could be started; Solve then solves
// in this process.
var errNoChild = errors.New("cbc: no child process")

// childResult is what a child sends back.
type childResult struct {
	Sol *Solution
	Err string
}

// solveApart solves p in a child process and kills it when it runs
// overrunGrace past p.MaxSeconds.
func solveApart(p *Problem) (*Solution, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, errNoChild
	}
	var in bytes.Buffer
	if err := gob.NewEncoder(&in).Encode(p); err != nil {
		return nil, fmt.Errorf("cbc: encoding the problem: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, errNoChild
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, errNoChild
	}
	w.Close()
	// Read the result while the child runs, so a large one never blocks
	// it on a full pipe.
	got := make(chan childResult, 1)
	go func() {
		var res childResult
		if err := gob.NewDecoder(r).Decode(&res); err != nil {
			res.Err = "no result: " + err.Error()
		}
		got <- res
	}()
	var overran atomic.Bool
	timer := time.AfterFunc(time.Duration(p.MaxSeconds*float64(time.Second))+overrunGrace(p.MaxSeconds), func() {
		overran.Store(true)
		_ = cmd.Process.Kill()
	})
	waitErr := cmd.Wait()
	timer.Stop()
	res := <-got
	switch {
	case res.Err == "" && res.Sol != nil:
	case overran.Load():
		return &Solution{Status: NoSolution, Bound: math.Inf(-1), Overran: true}, nil
	case res.Err != "":
		msg := res.Err
		if s := strings.TrimSpace(stderr.String()); s != "" {
			msg += ": " + s
		}
		return nil, fmt.Errorf("cbc: solving in a child process: %s", msg)
	default:
		return nil, fmt.Errorf("cbc: the solving process failed: %v", waitErr)
	}
	return res.Sol, nil
}

// serveChild runs one solve for the parent: the exit code is 0 when a
// result, or the solver's error, was sent back.
func serveChild() int {
	var p Problem
	var res childResult
	if err := gob.NewDecoder(os.Stdin).Decode(&p); err != nil {
		res.Err = "decoding the problem: " + err.Error()
	} else if sol, err := solveHere(&p); err != nil {
		res.Err = err.Error()
	} else {
		res.Sol = sol
	}
	if err := gob.NewEncoder(os.NewFile(3, "result")).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "cbc child:", err)
		return 2
	}
	return 0
}
