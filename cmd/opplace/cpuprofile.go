package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// profileEnv names the environment variable that, when set to a file
// path, makes opplace write a CPU profile of the whole command there (for
// `go tool pprof`), as the Go compiler's -cpuprofile does: for finding
// where a slow plan spends its time without rebuilding.
const profileEnv = "OPPLACE_CPUPROFILE"

// startCPUProfile starts the profile profileEnv asks for and returns the
// function that stops and writes it; a profile that cannot start is
// reported on stderr and the command runs unprofiled.
func startCPUProfile(stderr io.Writer) func() {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "opplace: warning: %s: %v\n", profileEnv, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "opplace: warning: %s: %v\n", profileEnv, err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
