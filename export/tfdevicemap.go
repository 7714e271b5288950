package export

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/tfdevice"
	"github.com/opplace/opplace/plan"
)

func init() {
	Register("tf-device-map", "JSON: every op's TensorFlow device string (op name -> /job:worker/replica:0/task:T/device:GPU:I), for tf.device or a graph rewrite",
		func() Target { return tfDeviceMap{} })
}

// tfDeviceMap writes one JSON object mapping every op of the plan, in
// plan order, to its device as a TensorFlow device string. Any plan
// exports, one stage or several, but a tensor-parallel one.
type tfDeviceMap struct{}

func (tfDeviceMap) Export(w io.Writer, p *plan.Plan, o Options) error {
	if p.TensorParallel > 1 {
		// A device per op would run each split op whole on one member.
		return errorf(Invalid, "%s: the plan splits ops over tensor-parallel groups of %d, which a device per op cannot say; plan with tensor parallelism turned off to export a device map", o.source(), p.TensorParallel)
	}
	strs, err := DeviceStrings(p, o.DeviceTemplate)
	if err != nil {
		return errorf(Invalid, "%s: %v", o.source(), err)
	}
	bw := bufio.NewWriter(w)
	bw.WriteString("{")
	for i, op := range p.Ops {
		if i > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n  ")
		k, _ := json.Marshal(op.Name)
		v, _ := json.Marshal(strs[op.Device])
		bw.Write(k)
		bw.WriteString(": ")
		bw.Write(v)
	}
	if len(p.Ops) > 0 {
		bw.WriteString("\n")
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// DeviceStrings renders every device of the plan as a TensorFlow device
// string with the template (tfdevice.DefaultTemplate when empty), as plan
// --emit-model does with the cluster: a device's task is the index of its
// host among the plan's hosts, in the order the plan lists devices, and
// its kind (GPU, CPU, TPU) comes from its type's name.
func DeviceStrings(p *plan.Plan, tmpl string) (map[string]string, error) {
	c := &cluster.Cluster{Name: p.Cluster}
	hosts := map[string]int{}
	types := map[string]*cluster.DeviceType{}
	for _, d := range p.Devices {
		h, ok := hosts[d.Host]
		if !ok {
			h = len(c.Hosts)
			hosts[d.Host] = h
			c.Hosts = append(c.Hosts, cluster.Host{Name: d.Host})
		}
		t := types[d.Type]
		if t == nil {
			t = &cluster.DeviceType{Name: d.Type}
			types[d.Type] = t
		}
		c.Devices = append(c.Devices, cluster.Device{Name: d.Name, Type: t, Host: h, Memory: d.MemoryBytes})
	}
	strs, err := tfdevice.Strings(c, tmpl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(strs))
	for i, d := range c.Devices {
		out[d.Name] = strs[i]
	}
	return out, nil
}
