package driver

import (
	"fmt"
	"os"
	"slices"

	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/profile"
)

// PoolOptions say which profiles to pool into one calibration.
type PoolOptions struct {
	// From are the profiles pooled; Holdout profiles are priced with the
	// pooled calibration, not fitted to.
	From, Holdout []string
	// Model, when set, fills the op features of the profiles (and
	// held-out ones) written without them; Import binds its dimensions,
	// and those of the models old profiles name.
	Model  string
	Import importopt.Options
	// DeviceType and Threads, when set, calibrate only the device type
	// entries of that name and thread count.
	DeviceType string
	Threads    int
	// LoadModel imports a model; nil is pipeline.LoadModel.
	LoadModel ModelLoader
}

// PoolResult is what Pool made.
type PoolResult struct {
	// Profile holds every measurement of the pooled profiles and per
	// device type entry (name, threads) one calibration fitted to all.
	Profile *profile.Profile
	// Refits are the profiles without op features whose model they name
	// was read to refit them, in order.
	Refits []Refit
	// Calibrated are the device type entries calibrated, in order.
	Calibrated []Pooled
}

// Refit is an old profile's features refitted from the model it names.
type Refit struct {
	Model string
	// Refitted is how many measurements got features, or Err why the
	// model could not be read (the profile then keeps none).
	Refitted int
	Err      error
}

// Pooled is one device type entry's pooled calibration and how it priced
// the held-out profiles that have the entry.
type Pooled struct {
	DeviceType  *profile.DeviceType
	Calibration *profile.Calibration
	Holdouts    []Holdout
}

// Holdout is a held-out profile priced with the pooled calibration
// (Calibrated) and with the uncalibrated roofline (Roofline).
type Holdout struct {
	Path                 string
	Calibrated, Roofline profile.Check
}

// NoMatchError says no device type entry of the pooled profiles has the
// name and thread count asked for.
type NoMatchError struct {
	DeviceType string
	Threads    int
}

func (e *NoMatchError) Error() string {
	return fmt.Sprintf("no device type of the pooled profiles matches device type %q at threads %d", e.DeviceType, e.Threads)
}

// Pool merges the profiles of o.From into one and fits, per device type
// entry, one calibration to all their measurements.
func Pool(o PoolOptions) (*PoolResult, error) {
	load := o.LoadModel
	if load == nil {
		load = pipeline.LoadModel
	}
	res := &PoolResult{}
	var ps []*profile.Profile
	named := map[*profile.Profile]bool{} // profiles that name their model
	for _, path := range o.From {
		p, err := profile.Load(path)
		if err != nil {
			return res, &pipeline.InputError{Err: err}
		}
		named[p] = p.Model != ""
		if p.Model == "" {
			p.Model = path
		}
		ps = append(ps, p)
	}
	var holdouts []*profile.Profile
	for _, path := range o.Holdout {
		p, err := profile.Load(path)
		if err != nil {
			return res, &pipeline.InputError{Err: err}
		}
		named[p] = p.Model != ""
		holdouts = append(holdouts, p)
	}
	all := append(slices.Clone(ps), holdouts...)
	if o.Model != "" {
		m, err := load(o.Model, o.Import)
		if err != nil {
			return res, err
		}
		for _, p := range all {
			profile.FillFeatures(p, m.Graph)
		}
	}
	// Profiles written before measurements carried their op's features
	// are refitted from the model they name, at their batch (or the
	// dimensions given); ops whose shapes then differ keep none, and the
	// calibration's error says how to refit by hand.
	for _, p := range all {
		if p.MissingFeatures() == 0 || !named[p] {
			continue
		}
		if st, err := os.Stat(p.Model); err != nil || st.IsDir() {
			continue
		}
		opts := o.Import
		if opts.Batch == 0 && p.Batch > 0 {
			opts.Batch = p.Batch
		}
		m, err := load(p.Model, opts)
		if err != nil {
			res.Refits = append(res.Refits, Refit{Model: p.Model, Err: err})
			continue
		}
		res.Refits = append(res.Refits, Refit{Model: p.Model, Refitted: profile.FillFeatures(p, m.Graph)})
	}
	merged := profile.Merge(ps)
	for i := range merged.DeviceTypes {
		dt := &merged.DeviceTypes[i]
		if o.DeviceType != "" && dt.Name != o.DeviceType || o.Threads != 0 && dt.Threads != o.Threads {
			continue
		}
		cal, err := profile.CalibratePooled(ps, dt.Name, dt.Threads)
		if err != nil {
			return res, &pipeline.InputError{Err: err}
		}
		dt.Calibration = cal
		pooled := Pooled{DeviceType: dt, Calibration: cal}
		for j, h := range holdouts {
			hd := h.DeviceTypeAt(dt.Name, dt.Threads)
			if hd == nil {
				continue
			}
			// The held-out profile's measurements, priced on the pooled
			// roofline.
			q := h.Relabel(hd, dt)
			pooled.Holdouts = append(pooled.Holdouts, Holdout{o.Holdout[j], profile.CheckCalibration(cal, dt, q), profile.CheckCalibration(nil, dt, q)})
		}
		res.Calibrated = append(res.Calibrated, pooled)
	}
	if len(res.Calibrated) == 0 {
		return res, &NoMatchError{o.DeviceType, o.Threads}
	}
	res.Profile = merged
	return res, nil
}
