package tf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	graphpb "github.com/wamuir/graft/tensorflow/core/framework/graph_go_proto"
	nodepb "github.com/wamuir/graft/tensorflow/core/framework/node_def_go_proto"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// Annotate returns a TensorFlow model file (binary or text GraphDef, or
// TF.js model.json) with the device field of every node named in devices
// (node name → TensorFlow device string) set. A Const or Placeholder
// node, which opplace treats as a tensor rather than an op, gets the
// device of its first consumer that has one, so weights sit where they
// are used. Other nodes keep their field. The output is deterministic;
// everything else in the file is kept (TF.js JSON is rewritten with
// sorted keys, binary GraphDefs keep unknown fields).
func Annotate(data []byte, devices map[string]string) ([]byte, error) {
	switch Sniff(data[:min(len(data), 512)]) {
	case JSGraphModel:
		return annotateJS(data, devices)
	case TextGraphDef:
		gd := &graphpb.GraphDef{}
		if err := (prototext.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, gd); err != nil {
			return nil, fmt.Errorf("not a text GraphDef (%v)", err)
		}
		setDevices(gd.GetNode(), devices)
		return prototext.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(gd)
	}
	gd := &graphpb.GraphDef{}
	if err := proto.Unmarshal(data, gd); err != nil {
		return nil, fmt.Errorf("not a TensorFlow GraphDef (%v)", err)
	}
	setDevices(gd.GetNode(), devices)
	return proto.MarshalOptions{Deterministic: true}.Marshal(gd)
}

// setDevices writes devices onto nodes, giving sources their first
// consumer's device.
func setDevices(nodes []*nodepb.NodeDef, devices map[string]string) {
	dev := nodeDevices(len(nodes), func(i int) (string, string, []string) {
		return nodes[i].GetName(), nodes[i].GetOp(), nodes[i].GetInput()
	}, devices)
	for i, d := range dev {
		if d != "" {
			nodes[i].Device = d
		}
	}
}

// nodeDevices computes each node's new device ("" to keep its own):
// ops from devices, sources from their first consumer in file order.
func nodeDevices(n int, node func(i int) (name, op string, inputs []string), devices map[string]string) []string {
	out := make([]string, n)
	index := map[string]int{}
	for i := range n {
		name, _, _ := node(i)
		index[name] = i
	}
	for i := range n {
		name, op, _ := node(i)
		if !isSource(op) {
			out[i] = devices[name]
		}
	}
	for i := range n {
		_, _, inputs := node(i)
		if out[i] == "" {
			continue
		}
		for _, in := range inputs {
			src, ok := index[nodeOf(in)]
			if !ok {
				continue
			}
			if _, op, _ := node(src); isSource(op) && out[src] == "" {
				out[src] = out[i]
			}
		}
	}
	return out
}

// nodeOf strips a control marker and output index from an input.
func nodeOf(in string) string {
	if len(in) > 0 && in[0] == '^' {
		in = in[1:]
	}
	if k := bytes.LastIndexByte([]byte(in), ':'); k >= 0 {
		in = in[:k]
	}
	return in
}

// annotateJS sets "device" on the modelTopology nodes of a TF.js
// model.json, leaving every other field as it was (numbers verbatim).
func annotateJS(data []byte, devices map[string]string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not a TensorFlow.js model: %v", err)
	}
	topo, _ := doc["modelTopology"].(map[string]any)
	nodes, _ := topo["node"].([]any)
	if len(nodes) == 0 {
		return nil, errors.New("is not a TensorFlow.js graph model: modelTopology has no nodes")
	}
	get := func(i int) (string, string, []string) {
		m, _ := nodes[i].(map[string]any)
		name, _ := m["name"].(string)
		op, _ := m["op"].(string)
		var ins []string
		if l, ok := m["input"].([]any); ok {
			for _, x := range l {
				if s, ok := x.(string); ok {
					ins = append(ins, s)
				}
			}
		}
		return name, op, ins
	}
	for i, d := range nodeDevices(len(nodes), get, devices) {
		if m, ok := nodes[i].(map[string]any); ok && d != "" {
			m["device"] = d
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
