package tf

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	tensorpb "github.com/wamuir/graft/tensorflow/core/framework/tensor_go_proto"
	shapepb "github.com/wamuir/graft/tensorflow/core/framework/tensor_shape_go_proto"
	typespb "github.com/wamuir/graft/tensorflow/core/framework/types_go_proto"
)

// dtypeOf maps a TensorFlow DataType (reference types included) to
// opplace's element type; Undefined for resource, variant and quantized
// types opplace does not size.
func dtypeOf(t typespb.DataType) graph.DType {
	if t > 100 {
		t -= 100 // DT_*_REF
	}
	switch t {
	case typespb.DataType_DT_FLOAT:
		return graph.Float32
	case typespb.DataType_DT_DOUBLE:
		return graph.Float64
	case typespb.DataType_DT_INT32:
		return graph.Int32
	case typespb.DataType_DT_UINT8, typespb.DataType_DT_QUINT8:
		return graph.Uint8
	case typespb.DataType_DT_INT16, typespb.DataType_DT_QINT16:
		return graph.Int16
	case typespb.DataType_DT_INT8, typespb.DataType_DT_QINT8:
		return graph.Int8
	case typespb.DataType_DT_STRING:
		return graph.String
	case typespb.DataType_DT_COMPLEX64:
		return graph.Complex64
	case typespb.DataType_DT_INT64:
		return graph.Int64
	case typespb.DataType_DT_BOOL:
		return graph.Bool
	case typespb.DataType_DT_BFLOAT16:
		return graph.BFloat16
	case typespb.DataType_DT_UINT16, typespb.DataType_DT_QUINT16:
		return graph.Uint16
	case typespb.DataType_DT_COMPLEX128:
		return graph.Complex128
	case typespb.DataType_DT_HALF:
		return graph.Float16
	case typespb.DataType_DT_UINT32:
		return graph.Uint32
	case typespb.DataType_DT_UINT64:
		return graph.Uint64
	case typespb.DataType_DT_QINT32:
		return graph.Int32
	}
	return graph.Undefined
}

func isIntType(d graph.DType) bool {
	switch d {
	case graph.Int32, graph.Int64, graph.Int16, graph.Int8, graph.Uint8, graph.Uint16, graph.Uint32, graph.Uint64, graph.Bool:
		return true
	}
	return false
}

// shapeOf reads a TensorShapeProto: ranked reports a known rank, dims
// are -1 where unknown.
func shapeOf(s *shapepb.TensorShapeProto) (dims []int64, ranked bool) {
	if s == nil || s.GetUnknownRank() {
		return nil, false
	}
	dims = make([]int64, 0, len(s.GetDim()))
	for _, d := range s.GetDim() {
		sz := d.GetSize()
		if sz < 0 {
			sz = unknownDim
		}
		dims = append(dims, sz)
	}
	return dims, true
}

// tensorValue reads a TensorProto's type, shape and, for small integer
// tensors, contents (from tensor_content or the typed value lists, with
// TensorFlow's rule that a short list repeats its last element).
func tensorValue(t *tensorpb.TensorProto) (*value, error) {
	dims, ranked := shapeOf(t.GetTensorShape())
	if !ranked {
		dims = []int64{}
	}
	if err := checkShape(dims); err != nil {
		return nil, err
	}
	v := &value{dtype: dtypeOf(t.GetDtype()), shape: dims, ranked: true}
	n := shapes.Prod(dims)
	if !isIntType(v.dtype) || n > maxFold {
		return v, nil
	}
	var ints []int64
	size := v.dtype.Size()
	switch raw := t.GetTensorContent(); {
	case len(raw) > 0:
		if int64(len(raw)) != n*size {
			return nil, fmt.Errorf("tensor_content holds %d bytes, the %s shape %s needs %d", len(raw), v.dtype, fmtShape(dims), n*size)
		}
		ints = make([]int64, n)
		for i := range ints {
			ints[i] = readInt(raw[int64(i)*size:], v.dtype)
		}
	case len(t.GetIntVal()) > 0:
		for _, x := range t.GetIntVal() {
			ints = append(ints, int64(x))
		}
	case len(t.GetInt64Val()) > 0:
		ints = append(ints, t.GetInt64Val()...)
	case len(t.GetBoolVal()) > 0:
		for _, b := range t.GetBoolVal() {
			ints = append(ints, boolInt(b))
		}
	case len(t.GetUint32Val()) > 0:
		for _, x := range t.GetUint32Val() {
			ints = append(ints, int64(x))
		}
	default:
		return v, nil // no contents: a TF.js weight, or an empty tensor
	}
	if int64(len(ints)) > n {
		return nil, fmt.Errorf("holds %d values, its shape %s has %d elements", len(ints), fmtShape(dims), n)
	}
	for int64(len(ints)) < n && len(ints) > 0 {
		ints = append(ints, ints[len(ints)-1])
	}
	if int64(len(ints)) == n {
		v.ints = ints
	}
	return v, nil
}

// readInt decodes one little-endian element of an integer type.
func readInt(b []byte, dt graph.DType) int64 {
	switch dt {
	case graph.Int32:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	case graph.Int64:
		return int64(binary.LittleEndian.Uint64(b))
	case graph.Int16:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case graph.Uint16:
		return int64(binary.LittleEndian.Uint16(b))
	case graph.Uint32:
		return int64(binary.LittleEndian.Uint32(b))
	case graph.Uint64:
		return int64(binary.LittleEndian.Uint64(b))
	case graph.Int8:
		return int64(int8(b[0]))
	}
	return int64(b[0]) // uint8, bool
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func sortStrings(s []string) { sort.Strings(s) }
