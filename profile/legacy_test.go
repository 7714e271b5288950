package profile

// The flat per-family fit calibration used before MethodShape (one
// compute and one memory efficiency and an overhead per family, solved by
// alternating weighted least squares), kept here to compare against.

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/opplace/opplace/cost"
)

// legacyCalibrate is the old Calibrate's fit of samples.
func legacyCalibrate(samples []Sample, dt *DeviceType) *Calibration {
	c := &Calibration{}
	fams := map[string][]Sample{}
	var names []string
	for _, s := range samples {
		if _, ok := fams[s.Family]; !ok {
			names = append(names, s.Family)
		}
		fams[s.Family] = append(fams[s.Family], s)
	}
	slices.Sort(names)
	for _, n := range names {
		if len(fams[n]) >= 3 {
			c.Families = append(c.Families, legacyFitFamily(n, fams[n], dt.LaunchOverhead))
		}
	}
	c.Families = append(c.Families, legacyFitFamily(FamilyAll, samples, dt.LaunchOverhead))
	return c
}

// legacyFitFamily fits t = max(c·a, m·b) + o to the samples, minimising the
// squared relative error, where a = 1/compute efficiency and b = 1/memory
// efficiency. The max makes it piecewise linear: each round assigns every
// sample to the bound (compute or memory) the current fit says limits it
// and solves the weighted linear least-squares problem of that assignment
// (gonum QR), until the assignment stops changing. The overhead is kept
// non-negative by also solving without it; the better fit wins.
func legacyFitFamily(name string, s []Sample, overhead float64) FamilyFit {
	a, b := 1/cost.DefaultComputeEfficiency, 1/cost.DefaultMemoryEfficiency
	best := FamilyFit{Family: name, ComputeEfficiency: 1 / a, MemoryEfficiency: 1 / b, OverheadS: overhead, Samples: len(s)}
	bestObj := legacyObjective(best, s)
	computeBound := make([]bool, len(s))
	for round := 0; round < 20; round++ {
		changed := round == 0
		for i, x := range s {
			cb := x.Compute*a >= x.Memory*b
			changed = changed || cb != computeBound[i]
			computeBound[i] = cb
		}
		if !changed {
			break
		}
		for _, withOverhead := range []bool{true, false} {
			na, nb, no, ok := legacySolve(s, computeBound, withOverhead, a, b)
			if !ok {
				continue
			}
			f := FamilyFit{Family: name, ComputeEfficiency: 1 / na, MemoryEfficiency: 1 / nb, OverheadS: no, Samples: len(s)}
			if obj := legacyObjective(f, s); obj < bestObj {
				best, bestObj = f, obj
			}
		}
		a, b = 1/best.ComputeEfficiency, 1/best.MemoryEfficiency
	}
	best.ComputeEfficiency = sig(best.ComputeEfficiency)
	best.MemoryEfficiency = sig(best.MemoryEfficiency)
	best.OverheadS = sig(best.OverheadS)
	return best
}

// solve is one weighted least-squares round. Columns with no sample (no
// compute-bound or no memory-bound op) keep their current coefficient.
func legacySolve(s []Sample, computeBound []bool, withOverhead bool, a, b float64) (na, nb, no float64, ok bool) {
	var hasC, hasM bool
	for _, cb := range computeBound {
		hasC, hasM = hasC || cb, hasM || !cb
	}
	var cols []int // 0: a, 1: b, 2: overhead
	if hasC {
		cols = append(cols, 0)
	}
	if hasM {
		cols = append(cols, 1)
	}
	if withOverhead {
		cols = append(cols, 2)
	}
	if len(cols) == 0 || len(s) < len(cols) {
		return 0, 0, 0, false
	}
	A := mat.NewDense(len(s), len(cols), nil)
	y := mat.NewVecDense(len(s), nil)
	for i, x := range s {
		w := 1 / x.Measured
		target := x.Measured
		// A column not being fitted contributes with its fixed value.
		if !hasC && computeBound[i] {
			target -= x.Compute * a
		}
		if !hasM && !computeBound[i] {
			target -= x.Memory * b
		}
		for j, c := range cols {
			var v float64
			switch c {
			case 0:
				if computeBound[i] {
					v = x.Compute
				}
			case 1:
				if !computeBound[i] {
					v = x.Memory
				}
			case 2:
				v = 1
			}
			A.Set(i, j, v*w)
		}
		y.SetVec(i, target*w)
	}
	var sol mat.VecDense
	if err := sol.SolveVec(A, y); err != nil {
		return 0, 0, 0, false
	}
	na, nb = a, b
	for j, c := range cols {
		v := sol.AtVec(j)
		switch c {
		case 0:
			na = v
		case 1:
			nb = v
		case 2:
			no = v
		}
	}
	// Efficiencies above 100x peak or non-positive are not physical; a
	// negative overhead is dropped by the round without one.
	if na < 0.01 || nb < 0.01 || no < 0 || math.IsNaN(na+nb+no) {
		return 0, 0, 0, false
	}
	return na, nb, no, true
}

func legacyObjective(f FamilyFit, s []Sample) float64 {
	var sum float64
	for _, x := range s {
		r := (max(x.Compute/f.ComputeEfficiency, x.Memory/f.MemoryEfficiency) + f.OverheadS - x.Measured) / x.Measured
		sum += r * r
	}
	return sum
}
