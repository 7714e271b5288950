// Package tfdevice renders a cluster's devices as TensorFlow device
// strings (/job:worker/replica:0/task:T/device:GPU:I, or a template of
// the user's) and reads such strings back to cluster devices: the strings
// the TensorFlow importer's pins, its annotated export and the
// tf-device-map export target share.
package tfdevice

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/opplace/opplace/cluster"
)

// DefaultTemplate renders a cluster device as a TensorFlow device string:
// host i of the cluster is task i of job "worker", and a device is the
// n-th device of its kind (GPU or CPU) within its host.
const DefaultTemplate = "/job:worker/replica:0/task:{task}/device:{kind}:{index}"

// templateTokens are the placeholders a device template may use.
var templateTokens = []string{"{task}", "{host}", "{kind}", "{index}", "{name}", "{type}"}

// CheckTemplate rejects a template that cannot tell devices apart: it
// must use {name}, or {index} (with {task} or {host} when the cluster has
// several hosts; Render checks that the strings come out distinct).
func CheckTemplate(tmpl string) error {
	if !strings.Contains(tmpl, "{name}") && !strings.Contains(tmpl, "{index}") {
		return fmt.Errorf("device template %q must contain {index} or {name} (placeholders: %s)", tmpl, strings.Join(templateTokens, " "))
	}
	rest := tmpl
	for _, t := range templateTokens {
		rest = strings.ReplaceAll(rest, t, "")
	}
	if i := strings.IndexByte(rest, '{'); i >= 0 {
		return fmt.Errorf("device template %q has an unknown placeholder near %q (placeholders: %s)", tmpl, rest[i:], strings.Join(templateTokens, " "))
	}
	return nil
}

// Kind is the TensorFlow device type of a cluster device type: CPU
// or TPU when its name says so, else GPU.
func Kind(t *cluster.DeviceType) string {
	name := ""
	if t != nil {
		name = strings.ToUpper(t.Name)
	}
	switch {
	case strings.Contains(name, "CPU"):
		return "CPU"
	case strings.Contains(name, "TPU"):
		return "TPU"
	}
	return "GPU"
}

// Strings renders every device of c with the template (empty for
// DefaultTemplate), indexed like c.Devices. The strings must come out
// distinct.
func Strings(c *cluster.Cluster, tmpl string) ([]string, error) {
	if tmpl == "" {
		tmpl = DefaultTemplate
	}
	if err := CheckTemplate(tmpl); err != nil {
		return nil, err
	}
	out := make([]string, len(c.Devices))
	seen := map[string]int{}
	perHost := map[[2]string]int{}
	for i, d := range c.Devices {
		kind := Kind(d.Type)
		key := [2]string{strconv.Itoa(d.Host), kind}
		idx := perHost[key]
		perHost[key]++
		host, typ := "", ""
		if d.Host >= 0 && d.Host < len(c.Hosts) {
			host = c.Hosts[d.Host].Name
		}
		if d.Type != nil {
			typ = d.Type.Name
		}
		s := strings.NewReplacer("{task}", strconv.Itoa(d.Host), "{host}", host, "{kind}", kind,
			"{index}", strconv.Itoa(idx), "{name}", d.Name, "{type}", typ).Replace(tmpl)
		if j, dup := seen[s]; dup {
			return nil, fmt.Errorf("device template %q gives %s and %s the same string %q; add {task} or {name}", tmpl, c.Devices[j].Name, d.Name, s)
		}
		seen[s] = i
		out[i] = s
	}
	return out, nil
}

// PinResolver maps a node's TensorFlow device field to the name of the
// cluster device it pins the node to; "" leaves the node free.
type PinResolver func(tfDevice string) (string, error)

// NewPinResolver resolves device fields against c: first as a string the
// template renders (so annotated models read back exactly), then as a
// cluster device name, then as a TensorFlow device spec
// (/job:J/replica:R/task:T/device:KIND:I, or legacy /gpu:I, /cpu:I):
// task T is host T, and KIND:I the I-th device of that kind in the host
// (task 0 when the spec names none). A spec naming no device kind, or
// index "*", pins nothing.
func NewPinResolver(c *cluster.Cluster, tmpl string) (PinResolver, error) {
	strs, err := Strings(c, tmpl)
	if err != nil {
		return nil, err
	}
	byString := map[string]string{}
	for i, s := range strs {
		byString[s] = c.Devices[i].Name
	}
	return func(dev string) (string, error) {
		if name, ok := byString[dev]; ok {
			return name, nil
		}
		if _, ok := c.DeviceIndex(dev); ok {
			return dev, nil
		}
		task, kind, index, err := parseSpec(dev)
		if err != nil {
			return "", err
		}
		if kind == "" || index < 0 {
			return "", nil
		}
		if task >= len(c.Hosts) {
			return "", fmt.Errorf("task %d names no host: cluster %q has %d", task, c.Name, len(c.Hosts))
		}
		n := 0
		for _, d := range c.Devices {
			if d.Host == task && Kind(d.Type) == kind {
				if n == index {
					return d.Name, nil
				}
				n++
			}
		}
		return "", fmt.Errorf("cluster %q has %d %s devices on host %d (task %d), none with index %d; fix the device field or import without device pins", c.Name, n, kind, task, task, index)
	}, nil
}

// parseSpec reads a TensorFlow device spec. index is -1 for "*".
func parseSpec(s string) (task int, kind string, index int, err error) {
	bad := func() (int, string, int, error) {
		return 0, "", 0, fmt.Errorf("not a TensorFlow device spec (want /job:NAME/replica:R/task:T/device:GPU:I)")
	}
	for _, part := range strings.Split(strings.Trim(s, "/"), "/") {
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, ":")
		if !ok {
			return bad()
		}
		switch strings.ToLower(key) {
		case "job":
		case "replica":
			if _, e := strconv.Atoi(val); e != nil {
				return bad()
			}
		case "task":
			t, e := strconv.Atoi(val)
			if e != nil || t < 0 {
				return bad()
			}
			task = t
		case "device":
			k, idx, ok := strings.Cut(val, ":")
			if !ok {
				return bad()
			}
			kind = strings.ToUpper(k)
			if index, err = parseIndex(idx); err != nil {
				return bad()
			}
		case "cpu", "gpu", "tpu":
			kind = strings.ToUpper(key)
			if index, err = parseIndex(val); err != nil {
				return bad()
			}
		default:
			return bad()
		}
	}
	return task, kind, index, nil
}

func parseIndex(s string) (int, error) {
	if s == "*" {
		return -1, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad device index %q", s)
	}
	return v, nil
}
