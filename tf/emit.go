package tf

import (
	"fmt"
	"io"
	"os"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/plan"
)

// EmitModel writes the model file src to dst (atomically) with each op
// placed as placement says (op name → cluster device name). TensorFlow
// models get node device fields rendered with the template (empty for
// DefaultTemplate); anything else is taken for ONNX and annotated by
// onnx.Annotate with cluster device names. Ops of the plan that are not
// in the file (a training step's backward ops) are skipped.
func EmitModel(src, dst string, placement map[string]string, c *cluster.Cluster, tmpl string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	var out []byte
	if Sniff(data[:min(len(data), 512)]) != Unknown {
		strs, err := DeviceStrings(c, tmpl)
		if err != nil {
			return err
		}
		byName := map[string]string{}
		for i, d := range c.Devices {
			byName[d.Name] = strs[i]
		}
		devices := make(map[string]string, len(placement))
		for op, d := range placement {
			s, ok := byName[d]
			if !ok {
				return fmt.Errorf("op %q is placed on %q, which cluster %q does not have", op, d, c.Name)
			}
			devices[op] = s
		}
		if out, err = Annotate(data, devices); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
	} else if out, err = onnx.Annotate(data, placement, c.Name); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return plan.WriteFileAtomic(dst, func(w io.Writer) error {
		_, err := w.Write(out)
		return err
	})
}
