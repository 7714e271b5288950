package profile

import (
	"fmt"
	"slices"
)

// SourcePooled marks a merged profile whose measurements come from
// several sources.
const SourcePooled = "pooled"

// Merge pools profiles into one: every measurement (so each model's own
// ops still match by name and key), every device type entry (where
// several profiles have one name and thread count, PooledDeviceType: the
// median roofline; calibrations dropped: calibrate the merged profile
// with CalibratePooled), unsupported counts summed and unmatched names
// joined. Model is empty (the calibration lists the models); Batch and
// Source are kept where all profiles agree, else 0 and SourcePooled.
func Merge(ps []*Profile) *Profile {
	out := &Profile{Format: FormatVersion}
	unsup := map[string]*Unsupported{}
	unmatched := map[string]bool{}
	for i, p := range ps {
		if i == 0 {
			out.Source, out.Batch = p.Source, p.Batch
		}
		if p.Source != out.Source {
			out.Source = SourcePooled
		}
		if p.Batch != out.Batch {
			out.Batch = 0
		}
		for _, d := range p.DeviceTypes {
			if !slices.ContainsFunc(out.DeviceTypes, func(e DeviceType) bool { return e.Name == d.Name && e.Threads == d.Threads }) {
				out.DeviceTypes = append(out.DeviceTypes, PooledDeviceType(ps, d.Name, d.Threads))
			}
		}
		out.Ops = append(out.Ops, p.Ops...)
		for _, u := range p.Unsupported {
			if e := unsup[u.Type]; e != nil {
				e.Count += u.Count
			} else {
				c := u
				unsup[u.Type] = &c
			}
		}
		for _, n := range p.Unmatched {
			unmatched[n] = true
		}
	}
	for _, u := range unsup {
		out.Unsupported = append(out.Unsupported, *u)
	}
	for n := range unmatched {
		out.Unmatched = append(out.Unmatched, n)
	}
	out.Sort()
	return out
}

// Label names a profile in messages: its model, else "profile N" (i from 0).
func Label(p *Profile, i int) string {
	if p.Model != "" {
		return p.Model
	}
	return fmt.Sprintf("profile %d", i+1)
}

// ThreadsLabel renders a device type entry, "local-cpu" or "local-cpu@2t".
func (d *DeviceType) ThreadsLabel() string {
	if d.Threads == 0 {
		return d.Name
	}
	return d.Name + "@" + fmt.Sprint(d.Threads) + "t"
}
