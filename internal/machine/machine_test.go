package machine

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestParseCPUInfo(t *testing.T) {
	for _, tc := range []struct {
		file     string
		cores    int
		want     CPUInfo
		wantDesc string
	}{
		{"cpuinfo-xeon-avx512.txt", 2, CPUInfo{Model: "Intel(R) Xeon(R) Processor @ 2.80GHz", LogicalCores: 2, Lanes: 16, ISA: "AVX-512", FMA: true,
			MHz: 2793.438, FMAUnits: 2, PeakPerThread: 2793.438e6 * 16 * 2 * 2},
			"Intel(R) Xeon(R) Processor @ 2.80GHz (2 logical cores, AVX-512 16 lanes, FMA, 2793 MHz)"},
		{"cpuinfo-avx2.txt", 8, CPUInfo{Model: "AMD EPYC 7B12", LogicalCores: 8, Lanes: 8, ISA: "AVX2", FMA: true, MHz: 2250, FMAUnits: 2, PeakPerThread: 2250e6 * 8 * 2 * 2},
			"AMD EPYC 7B12 (8 logical cores, AVX2 8 lanes, FMA, 2250 MHz)"},
		{"cpuinfo-arm.txt", 4, CPUInfo{LogicalCores: 4, Lanes: 4, ISA: "NEON", FMA: true, FMAUnits: 1},
			runtime.GOARCH + " CPU (4 logical cores, NEON 4 lanes, FMA)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got := ParseCPUInfo(string(data), tc.cores)
			if d := got.PeakPerThread - tc.want.PeakPerThread; d > 1 || d < -1 {
				t.Errorf("peak per thread %g, want %g", got.PeakPerThread, tc.want.PeakPerThread)
			}
			got.PeakPerThread = tc.want.PeakPerThread
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if d := got.Description(); d != tc.wantDesc {
				t.Errorf("description %q, want %q", d, tc.wantDesc)
			}
		})
	}
	if m := CPU(); m.LogicalCores != runtime.NumCPU() || (runtime.GOOS == "linux" && !(m.LoadAverage >= 0)) || (runtime.GOOS == "linux" && strings.TrimSpace(m.Description()) == "") {
		t.Errorf("CPU() = %+v", m)
	}
}
