// Package machine describes the machine opplace runs on: its CPU (model,
// cores, SIMD width, clock, load) and its memory, for the device types
// opplace profile measures.
package machine

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// CPUInfo describes this machine's CPU.
type CPUInfo struct {
	// Model is the CPU's model name ("" when unknown).
	Model string
	// LogicalCores is the number of logical CPUs this process may use.
	LogicalCores int
	// Lanes is the widest SIMD vector in float32 lanes: 16 with
	// AVX-512F, 8 with AVX2 or AVX, 4 with SSE (or NEON), 1 otherwise.
	Lanes int
	// ISA names the vector extension Lanes comes from.
	ISA string
	// FMA says the CPU has fused multiply-add.
	FMA bool
	// MHz is the clock /proc/cpuinfo reports (the current clock of the
	// first CPU, which turbo and power saving move); 0 when unknown.
	MHz float64
	// FMAUnits is the number of vector FMA units per core assumed: 2 on
	// AVX2 and AVX-512 parts (every server core since Haswell issues two
	// FMAs per cycle; some AVX-512 parts have one 512-bit unit, so this
	// is an upper bound), 1 otherwise.
	FMAUnits int
	// PeakPerThread is the theoretical float32 FLOP/s of one thread:
	// clock × lanes × 2 (a multiply and an add per FMA) × FMAUnits; 0
	// when the clock is unknown.
	PeakPerThread float64
	// LoadAverage is the 1-minute load average (/proc/loadavg) when
	// CPU was called; a load at or above LogicalCores means other
	// processes compete for the CPU and timings move between runs.
	LoadAverage float64
}

// Description is a one-line summary, "Intel(R) Xeon(R) ... (2 logical
// cores, AVX-512 16 lanes, FMA, 2900 MHz)".
func (c CPUInfo) Description() string {
	model := c.Model
	if model == "" {
		model = runtime.GOARCH + " CPU"
	}
	parts := []string{fmt.Sprintf("%d logical cores", c.LogicalCores)}
	if c.ISA != "" {
		parts = append(parts, fmt.Sprintf("%s %d lanes", c.ISA, c.Lanes))
	}
	if c.FMA {
		parts = append(parts, "FMA")
	}
	if c.MHz > 0 {
		parts = append(parts, fmt.Sprintf("%.0f MHz", c.MHz))
	}
	return model + " (" + strings.Join(parts, ", ") + ")"
}

// CPU describes this machine's CPU from /proc/cpuinfo and the Go
// runtime.
func CPU() CPUInfo {
	data, _ := os.ReadFile("/proc/cpuinfo")
	c := ParseCPUInfo(string(data), runtime.NumCPU())
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(load)); len(f) > 0 {
			c.LoadAverage, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return c
}

// ParseCPUInfo describes a CPU from the text of /proc/cpuinfo (x86 or
// Arm) and the logical core count.
func ParseCPUInfo(text string, cores int) CPUInfo {
	c := CPUInfo{LogicalCores: cores, Lanes: 1, FMAUnits: 1}
	flags := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "model name", "Model Name":
			if c.Model == "" {
				c.Model = val
			}
		case "cpu MHz":
			if c.MHz == 0 {
				c.MHz, _ = strconv.ParseFloat(val, 64)
			}
		case "flags", "Features":
			if len(flags) == 0 {
				for _, f := range strings.Fields(val) {
					flags[f] = true
				}
			}
		}
	}
	switch {
	case flags["avx512f"]:
		c.Lanes, c.ISA = 16, "AVX-512"
	case flags["avx2"]:
		c.Lanes, c.ISA = 8, "AVX2"
	case flags["avx"]:
		c.Lanes, c.ISA = 8, "AVX"
	case flags["sse"] || flags["sse2"]:
		c.Lanes, c.ISA = 4, "SSE"
	case flags["asimd"]:
		c.Lanes, c.ISA = 4, "NEON"
	}
	c.FMA = flags["fma"] || flags["avx512f"] || flags["asimd"]
	if c.FMA && (flags["avx2"] || flags["avx512f"]) {
		c.FMAUnits = 2
	}
	if c.MHz > 0 {
		perCycle := float64(c.Lanes)
		if c.FMA {
			perCycle *= 2 * float64(c.FMAUnits)
		}
		c.PeakPerThread = c.MHz * 1e6 * perCycle
	}
	return c
}

// TotalMemory is the machine's memory (MemTotal of /proc/meminfo) in
// bytes, 0 when it cannot be read (not Linux).
func TotalMemory() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// AvailableMemory is the smaller of TotalMemory and a cgroup v2 limit
// (/sys/fs/cgroup/memory.max), in bytes; 0 when neither can be read.
func AvailableMemory() int64 {
	total := TotalMemory()
	if data, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && limit > 0 && (total == 0 || limit < total) {
			total = limit
		}
	}
	return total
}
