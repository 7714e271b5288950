package onnx

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// AnnotateOptions says where an annotated model comes from and goes.
type AnnotateOptions struct {
	// Cluster is the name stored under ClusterKey; empty stores none.
	Cluster string
	// From and To are the directories of the model read and of the file
	// the annotated model will be written to. A tensor stored in an
	// external file names it relative to the model's directory, so when
	// they differ every such location is rewritten to name the same file
	// from To. Empty means the current directory.
	From, To string
}

// Annotate returns the serialized ONNX model with a metadata_props entry
// per main-graph node placed by devices (op name → device name), and the
// cluster's name under ClusterKey. Entries from an earlier annotation are
// replaced, external data locations are rewritten for o.To; nothing else
// changes. The output is deterministic.
func Annotate(data []byte, devices map[string]string, o AnnotateOptions) ([]byte, error) {
	mp, err := decodeModel(data)
	if err != nil {
		return nil, err
	}
	kept := mp.MetadataProps[:0]
	for _, p := range mp.MetadataProps {
		if k := p.GetKey(); k != ClusterKey && !strings.HasPrefix(k, DeviceKeyPrefix) {
			kept = append(kept, p)
		}
	}
	mp.MetadataProps = kept
	if err := relocate(mp, o.From, o.To); err != nil {
		return nil, err
	}
	if o.Cluster != "" {
		mp.MetadataProps = append(mp.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(ClusterKey), Value: proto.String(o.Cluster)})
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

// relocate rewrites the location of every tensor stored in an external
// file (initializers, Constant values, subgraphs, functions, training
// graphs: every TensorProto in the model) so it names the same file from
// directory to as it did from directory from. The data files are not
// touched, nor need they exist: only their names move.
//
// A location must stay inside the model's directory: ONNX 1.12's
// onnx.load strips a leading "../" and reads another file, and ONNX 1.16
// and ONNX Runtime refuse such a path. A model written where its data
// files cannot be named that way is refused.
func relocate(mp *onnxpb.ModelProto, from, to string) error {
	fromAbs, err1 := filepath.Abs(from)
	toAbs, err2 := filepath.Abs(to)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if fromAbs == toAbs {
		return nil
	}
	var err error
	eachTensor(mp.ProtoReflect(), func(t *onnxpb.TensorProto) {
		if err != nil || t.GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
			return
		}
		for _, e := range t.ExternalData {
			if e.GetKey() != "location" || filepath.IsAbs(e.GetValue()) {
				continue
			}
			file := filepath.Join(fromAbs, filepath.FromSlash(e.GetValue()))
			rel, rerr := filepath.Rel(toAbs, file)
			if rerr != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				err = &ExternalDataError{Tensor: t.GetName(), Location: e.GetValue(), File: file, To: toAbs}
				return
			}
			e.Value = proto.String(filepath.ToSlash(rel))
		}
	})
	return err
}

// ExternalDataError is a model whose tensor data lives in a file the
// annotated model could not name from where it is to be written.
type ExternalDataError struct {
	Tensor   string
	Location string // as the model names it
	File     string // the file it names, absolute
	To       string // the directory the annotated model was to go to
}

func (e *ExternalDataError) Error() string {
	return fmt.Sprintf("tensor %q keeps its data in the external file %q (%s), which a model in %s cannot name: "+
		"ONNX reads external data only from the model's directory or below it; "+
		"write the annotated model into %s or a directory above it, or copy the model with its data files first",
		e.Tensor, e.Location, e.File, e.To, filepath.Dir(e.File))
}

// eachTensor calls fn on every TensorProto reachable from m, in field
// order, so nested graphs and attributes are covered without listing
// where the schema keeps tensors.
func eachTensor(m protoreflect.Message, fn func(*onnxpb.TensorProto)) {
	if t, ok := m.Interface().(*onnxpb.TensorProto); ok {
		fn(t)
		return
	}
	// Fields in declaration order, not m.Range's unspecified one, so the
	// tensor an error names is always the same.
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Message() == nil || fd.IsMap() || !m.Has(fd) {
			continue
		}
		if fd.IsList() {
			l := m.Get(fd).List()
			for j := 0; j < l.Len(); j++ {
				eachTensor(l.Get(j).Message(), fn)
			}
			continue
		}
		eachTensor(m.Get(fd).Message(), fn)
	}
}
