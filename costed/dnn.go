package costed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/opplace/opplace/cluster"
)

// The dnn-partitioning format (msr-fiddle/dnn-partitioning, the inputs of
// Tarnawski et al., NeurIPS 2020) knows two kinds of device: CPUs and
// accelerators ("FPGAs"). Each node has a latency on each; a node with
// supportedOnFpga 0 runs on CPUs only.
//
// Mapping onto a cluster: a device type whose name contains "CPU" (any
// case: CPU, Workstation-CPU) takes cpuLatency; every other type takes
// fpgaLatency. Latencies are read as milliseconds: the format does not
// name its unit, and in most of the published files an edge's cost is
// exactly size / 2^31 × 1000, a 2 GiB/s link timed in milliseconds.
//
// The rest: size (bytes) is the node's resident memory, a parameter
// tensor, which reproduces the format's memory constraint (the sizes of
// the nodes on a device add up); colorClass is a colocation group;
// isBackwardNode sets the backward phase; an edge's size is its bytes and
// the producer's output is its largest outgoing edge. Edge costs and
// maxSizePerFPGA, maxFPGAs and maxCPUs are not used: the cluster file
// describes the devices, their memory and links. Unknown fields (layerId)
// are ignored.
const (
	dnnCPU         = "cpu"
	dnnAccelerator = "accelerator"
)

func sniffDNN(head []byte) bool {
	return isJSONObject(head) && (bytes.Contains(head, []byte(`"maxSizePerFPGA"`)) ||
		bytes.Contains(head, []byte(`"cpuLatency"`)) || bytes.Contains(head, []byte(`"fpgaLatency"`)))
}

// dnnKind is the dnn-partitioning device kind of a cluster device type.
func dnnKind(dt *cluster.DeviceType) string {
	if strings.Contains(strings.ToLower(dt.Name), "cpu") {
		return dnnCPU
	}
	return dnnAccelerator
}

type dnnFile struct {
	MaxSizePerFPGA *float64          `json:"maxSizePerFPGA"`
	MaxFPGAs       *float64          `json:"maxFPGAs"`
	MaxCPUs        *float64          `json:"maxCPUs"`
	Nodes          []json.RawMessage `json:"nodes"`
	Edges          []json.RawMessage `json:"edges"`
}

type dnnNode struct {
	ID              *int64   `json:"id"`
	Name            string   `json:"name"`
	CPULatency      *float64 `json:"cpuLatency"`
	FPGALatency     *float64 `json:"fpgaLatency"`
	SupportedOnFpga *flag    `json:"supportedOnFpga"`
	IsBackwardNode  flag     `json:"isBackwardNode"`
	ColorClass      *int64   `json:"colorClass"`
	Size            float64  `json:"size"`
}

type dnnEdge struct {
	SourceID *int64  `json:"sourceId"`
	DestID   *int64  `json:"destId"`
	Size     float64 `json:"size"`
}

// flag is a 0/1 (or false/true) field.
type flag bool

func (f *flag) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "1", "1.0", "true":
		*f = true
	case "0", "0.0", "false", "null":
		*f = false
	default:
		return fmt.Errorf("expected 0 or 1, got %s", b)
	}
	return nil
}

// dnnWarning is attached to every graph read from this format.
const dnnWarning = "dnn-partitioning graph: latencies read as milliseconds; CPU latencies go to device types named like CPU, accelerator latencies to the rest; the file's edge costs and device counts are not used"

// parseDNN reads a dnn-partitioning document into a File whose times are
// keyed by device kind (dnnCPU, dnnAccelerator).
func parseDNN(data []byte, file string) (*File, error) {
	var raw dnnFile
	if err := decodeJSON(data, &raw, file, "", false); err != nil {
		return nil, err
	}
	if err := checkDupKeys(data, file); err != nil {
		return nil, err
	}
	if len(raw.Nodes) == 0 {
		return nil, errorf(file, "nodes", "no nodes; a dnn-partitioning graph lists at least one")
	}
	f := &File{Format: FormatV1, Name: strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), Ops: make([]Op, len(raw.Nodes))}
	byID := make(map[int64]int, len(raw.Nodes))
	byName := make(map[string]int, len(raw.Nodes))
	for i, m := range raw.Nodes {
		path := fmt.Sprintf("nodes[%d]", i)
		var nd dnnNode
		if err := decodeJSON(m, &nd, file, path, false); err != nil {
			return nil, err
		}
		if nd.ID == nil {
			return nil, errorf(file, path+".id", "missing; every node needs an id")
		}
		if j, dup := byID[*nd.ID]; dup {
			return nil, errorf(file, path+".id", "%d is already the id of nodes[%d]", *nd.ID, j)
		}
		byID[*nd.ID] = i
		if nd.Name == "" {
			nd.Name = fmt.Sprintf("node%d", *nd.ID)
		}
		if j, dup := byName[nd.Name]; dup {
			return nil, errorf(file, path+".name", "%q is already the name of nodes[%d]; names must be unique", nd.Name, j)
		}
		byName[nd.Name] = i
		op := &f.Ops[i]
		op.Name = nd.Name
		op.TimesMS = nil
		supported := nd.SupportedOnFpga == nil || bool(*nd.SupportedOnFpga)
		for _, lat := range []struct {
			field string
			v     *float64
			key   string
			need  bool
		}{{"cpuLatency", nd.CPULatency, dnnCPU, true}, {"fpgaLatency", nd.FPGALatency, dnnAccelerator, supported}} {
			switch {
			case !lat.need:
			case lat.v == nil:
				return nil, errorf(file, path+"."+lat.field, "missing")
			case !(*lat.v >= 0):
				return nil, errorf(file, path+"."+lat.field, "negative time %v", *lat.v)
			default:
				op.TimesMS = append(op.TimesMS, DeviceTime{Type: lat.key, MS: *lat.v})
			}
		}
		size, err := dnnBytes(nd.Size, file, path+".size")
		if err != nil {
			return nil, err
		}
		op.ParamBytes = size
		if nd.ColorClass != nil {
			op.Colocate = fmt.Sprintf("colorClass %d", *nd.ColorClass)
		}
		if nd.IsBackwardNode {
			op.Phase = "backward"
		}
	}
	type pair struct{ from, to int }
	seen := map[pair]int{}
	for i, m := range raw.Edges {
		path := fmt.Sprintf("edges[%d]", i)
		var ed dnnEdge
		if err := decodeJSON(m, &ed, file, path, false); err != nil {
			return nil, err
		}
		var ends [2]int
		for k, end := range []struct {
			field string
			id    *int64
		}{{"sourceId", ed.SourceID}, {"destId", ed.DestID}} {
			if end.id == nil {
				return nil, errorf(file, path+"."+end.field, "missing")
			}
			j, ok := byID[*end.id]
			if !ok {
				return nil, errorf(file, path+"."+end.field, "no node has id %d", *end.id)
			}
			ends[k] = j
		}
		if ends[0] == ends[1] {
			return nil, errorf(file, path, "sourceId and destId are both %d: a node cannot feed itself", *ed.SourceID)
		}
		if j, dup := seen[pair{ends[0], ends[1]}]; dup {
			return nil, errorf(file, path, "a second edge from %d to %d (edges[%d])", *ed.SourceID, *ed.DestID, j)
		}
		seen[pair{ends[0], ends[1]}] = i
		size, err := dnnBytes(ed.Size, file, path+".size")
		if err != nil {
			return nil, err
		}
		from := &f.Ops[ends[0]]
		from.OutputBytes = max(from.OutputBytes, size)
		f.Edges = append(f.Edges, Edge{From: from.Name, To: f.Ops[ends[1]].Name, Bytes: &size})
	}
	return f, nil
}

// dnnBytes rounds a size the format writes as a float (some are
// fractional averages) to whole bytes.
func dnnBytes(v float64, file, path string) (int64, error) {
	switch {
	case !(v >= 0):
		return 0, errorf(file, path, "negative byte count %v", v)
	case v > maxBytes:
		return 0, errorf(file, path, "%v bytes is over 1 PiB: is it in bytes?", v)
	}
	return int64(math.Round(v)), nil
}

func decodeDNN(data []byte, file string) (*Model, error) {
	f, err := parseDNN(data, file)
	if err != nil {
		return nil, err
	}
	e, err := f.check(file)
	if err != nil {
		return nil, err
	}
	m, err := build(f, e, file, dnnKind)
	if err != nil {
		return nil, err
	}
	m.Format = "dnn-partitioning"
	m.Warnings = []string{dnnWarning}
	return m, nil
}

// ConvertDNN reads a dnn-partitioning document and writes it as a v1
// File, giving cpuLatency to each of cpuTypes and fpgaLatency to each of
// accelTypes (device type names, as a cluster file spells them).
func ConvertDNN(data []byte, file string, cpuTypes, accelTypes []string) (*File, error) {
	for _, c := range cpuTypes {
		for _, a := range accelTypes {
			if strings.EqualFold(c, a) {
				return nil, fmt.Errorf("device type %q is given as both a CPU and an accelerator", c)
			}
		}
	}
	f, err := parseDNN(data, file)
	if err != nil {
		return nil, err
	}
	for i := range f.Ops {
		op := &f.Ops[i]
		var times Times
		for _, kind := range []struct {
			key   string
			types []string
		}{{dnnCPU, cpuTypes}, {dnnAccelerator, accelTypes}} {
			if t, ok := op.TimesMS.Get(kind.key); ok {
				for _, name := range kind.types {
					times = append(times, DeviceTime{Type: name, MS: t})
				}
			}
		}
		op.TimesMS = times
	}
	return f, f.Validate(file)
}
