package profile

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHeldOut is the transfer experiment of issue 19, run on real
// profiles when OPPLACE_CALIB_PROFILES names a folder of them (one
// device type, with features), e.g.
//
//	OPPLACE_CALIB_PROFILES=/tmp/profiles go test ./profile/ -run TestHeldOut -v
//
// : for each profile, calibrate on the others
// and price its measurements; print per-family and whole-model errors of
// the roofline, the old flat per-family fit (on one other model, the
// median over them, and pooled) and the shape fit (same).
func TestHeldOut(t *testing.T) {
	dir := os.Getenv("OPPLACE_CALIB_PROFILES")
	if dir == "" {
		t.Skip("OPPLACE_CALIB_PROFILES not set")
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var ps []*Profile
	for _, p := range paths {
		pr, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		pr.Model = strings.TrimSuffix(filepath.Base(p), ".json")
		ps = append(ps, pr)
	}
	name, threads := ps[0].DeviceTypes[0].Name, ps[0].DeviceTypes[0].Threads
	fmt.Printf("%-14s %-10s %9s %9s %9s %9s %9s\n", "held out", "", "roofline", "old-1", "old-pool", "new-1", "new-pool")
	var whole [5][]float64
	famErr := map[string]*[5][]float64{}
	// With OPPLACE_CALIB_HELDOUT=DIR, calibrate on all of the first
	// folder's profiles and price each of DIR's; else leave one out.
	held := ps
	if hd := os.Getenv("OPPLACE_CALIB_HELDOUT"); hd != "" {
		held = nil
		hp, _ := filepath.Glob(filepath.Join(hd, "*.json"))
		for _, p := range hp {
			pr, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			pr.Model = strings.TrimSuffix(filepath.Base(p), ".json")
			held = append(held, pr)
		}
	}
	for _, h := range held {
		var train []*Profile
		for _, p := range ps {
			if p != h {
				train = append(train, p)
			}
		}
		pooled := PooledDeviceType(train, name, threads)
		ref := &pooled
		pooledSamples := collect(train, ref, nil)
		newPool, err := CalibratePooled(train, name, threads)
		if err != nil {
			t.Fatal(err)
		}
		oldPool := legacyCalibrate(pooledSamples, ref)
		var old1, new1 []Check
		for _, p := range train {
			d := p.DeviceType(name)
			s := collect([]*Profile{p}, d, nil)
			old1 = append(old1, CheckCalibration(legacyCalibrate(s, d), d, h))
			new1 = append(new1, CheckCalibration(FitSamples(s, d), d, h))
		}
		roof := CheckCalibration(nil, h.DeviceType(name), h)
		op := CheckCalibration(oldPool, ref, h)
		np := CheckCalibration(newPool, ref, h)
		med := func(cs []Check, f func(Check) float64) float64 {
			var v []float64
			for _, c := range cs {
				v = append(v, f(c))
			}
			return median(v)
		}
		wholeErr := func(c Check) float64 { return c.WholeRelErr }
		opsErr := func(c Check) float64 { return c.Ops.MedianRelErr }
		row := [5]float64{roof.WholeRelErr, med(old1, wholeErr), op.WholeRelErr, med(new1, wholeErr), np.WholeRelErr}
		for k := range row {
			whole[k] = append(whole[k], row[k])
		}
		fmt.Printf("%-14s %-10s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%%\n", h.Model, "whole", 100*row[0], 100*row[1], 100*row[2], 100*row[3], 100*row[4])
		fmt.Printf("%-14s %-10s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%%\n", "", "ops med", 100*roof.Ops.MedianRelErr, 100*med(old1, opsErr), 100*op.Ops.MedianRelErr, 100*med(new1, opsErr), 100*np.Ops.MedianRelErr)
		var fams []string
		for f := range np.Families {
			fams = append(fams, f)
		}
		slices.Sort(fams)
		for _, f := range fams {
			fe := func(c Check) float64 { return c.Families[f].MedianRelErr }
			fmt.Printf("%-14s %-10s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%%   (%d ops)\n", "", f, 100*fe(roof), 100*med(old1, fe), 100*fe(op), 100*med(new1, fe), 100*fe(np), np.Families[f].Samples)
			if famErr[f] == nil {
				famErr[f] = &[5][]float64{}
			}
			for k, v := range []float64{fe(roof), med(old1, fe), fe(op), med(new1, fe), fe(np)} {
				famErr[f][k] = append(famErr[f][k], v)
			}
		}
	}
	var fams []string
	for f := range famErr {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	for _, f := range fams {
		e := famErr[f]
		fmt.Printf("%-14s %-10s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%%   (median over %d models of their median op error)\n", "MEDIAN", f,
			100*median(e[0]), 100*median(e[1]), 100*median(e[2]), 100*median(e[3]), 100*median(e[4]), len(e[0]))
	}
	fmt.Printf("%-14s %-10s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%%\n", "MEDIAN", "whole", 100*median(whole[0]), 100*median(whole[1]), 100*median(whole[2]), 100*median(whole[3]), 100*median(whole[4]))
}
