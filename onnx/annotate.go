package onnx

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Keys of the metadata_props entries Annotate writes. NodeProto has no
// metadata of its own in the bundled onnx.proto (IR 9), and a node
// attribute the operator schema does not know fails onnx.checker, so
// placements are model-level entries, one per node: the ONNX checker
// accepts them and onnx.load keeps them.
const (
	// DeviceKeyPrefix prefixes a node's op name (as opplace names it,
	// unnamed nodes "<OpType>_<index>") in the key of its device entry.
	DeviceKeyPrefix = "opplace.device:"
	// ClusterKey holds the name of the cluster the devices belong to.
	ClusterKey = "opplace.cluster"
)

// Annotate returns the serialized ONNX model with a metadata_props entry
// per main-graph node placed by devices (op name → device name), and the
// cluster's name under ClusterKey. Entries from an earlier annotation are
// replaced; nothing else changes. The output is deterministic.
func Annotate(data []byte, devices map[string]string, cluster string) ([]byte, error) {
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, mp); err != nil {
		return nil, fmt.Errorf("not an ONNX model (protobuf decoding failed: %v)", err)
	}
	if mp.GetIrVersion() <= 0 || mp.Graph == nil {
		return nil, errors.New("not an ONNX model (no ir_version or graph)")
	}
	kept := mp.MetadataProps[:0]
	for _, p := range mp.MetadataProps {
		if k := p.GetKey(); k != ClusterKey && !strings.HasPrefix(k, DeviceKeyPrefix) {
			kept = append(kept, p)
		}
	}
	mp.MetadataProps = kept
	if cluster != "" {
		mp.MetadataProps = append(mp.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(ClusterKey), Value: proto.String(cluster)})
	}
	for _, name := range uniqueNames(mp.Graph.GetNode()) {
		if d, ok := devices[name]; ok {
			mp.MetadataProps = append(mp.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(DeviceKeyPrefix + name), Value: proto.String(d)})
		}
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(mp)
}

// Devices reads back the placement Annotate wrote: op name → device, and
// the cluster name.
func Devices(data []byte) (map[string]string, string, error) {
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, mp); err != nil {
		return nil, "", fmt.Errorf("not an ONNX model (protobuf decoding failed: %v)", err)
	}
	out := map[string]string{}
	cluster := ""
	for _, p := range mp.GetMetadataProps() {
		if name, ok := strings.CutPrefix(p.GetKey(), DeviceKeyPrefix); ok {
			out[name] = p.GetValue()
		} else if p.GetKey() == ClusterKey {
			cluster = p.GetValue()
		}
	}
	return out, cluster, nil
}
