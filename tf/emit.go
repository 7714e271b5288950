package tf

import (
	"fmt"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/tfdevice"
)

// AnnotateDevices returns the TensorFlow model file data (binary or text
// GraphDef, or TF.js graph model) with each op placed as placement says
// (op name → cluster device name), the devices rendered as device strings
// with the template (tfdevice.DefaultTemplate when empty). Ops of the plan
// that are not in the file (a training step's backward ops) are skipped. With an
// empty placement it needs no cluster and only checks that data can be
// annotated.
func AnnotateDevices(data []byte, placement map[string]string, c *cluster.Cluster, tmpl string) ([]byte, error) {
	devices := make(map[string]string, len(placement))
	if len(placement) > 0 {
		strs, err := tfdevice.Strings(c, tmpl)
		if err != nil {
			return nil, err
		}
		byName := make(map[string]string, len(c.Devices))
		for i, d := range c.Devices {
			byName[d.Name] = strs[i]
		}
		for op, d := range placement {
			s, ok := byName[d]
			if !ok {
				return nil, fmt.Errorf("op %q is placed on %q, which cluster %q does not have", op, d, c.Name)
			}
			devices[op] = s
		}
	}
	return Annotate(data, devices)
}
