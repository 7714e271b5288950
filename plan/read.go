package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/internal/files"
)

// ReadFile reads a plan document as Write writes it, JSON or YAML (told
// apart by content, not by extension). Every error names the
// file and says what is wrong with it in one line.
func ReadFile(path string) (*Plan, error) {
	data, err := files.Read(path, "plan")
	if err != nil {
		return nil, err
	}
	p, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Decode parses a plan document, JSON or YAML, and checks that it is
// one: it lists devices, and every op and transfer names one of them.
func Decode(data []byte) (*Plan, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("the file is empty; expected a plan document")
	}
	p := &Plan{}
	if trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, p); err != nil {
			return nil, fmt.Errorf("not a valid JSON plan: %v", err)
		}
	} else {
		if err := yaml.Unmarshal(trimmed, p); err != nil {
			return nil, fmt.Errorf("not a valid plan (JSON or YAML): %v", err)
		}
	}
	if err := check(p); err != nil {
		return nil, fmt.Errorf("not a valid plan: %v", err)
	}
	return p, nil
}

// check catches documents that parse but are no plan (a cluster file, a
// truncated plan), so the report never draws nonsense.
func check(p *Plan) error {
	if len(p.Devices) == 0 {
		return errors.New("it lists no devices (is it a plan document?)")
	}
	devs := make(map[string]bool, len(p.Devices))
	for _, d := range p.Devices {
		if d.Name == "" {
			return errors.New("a device has no name")
		}
		devs[d.Name] = true
	}
	for _, op := range p.Ops {
		if !devs[op.Device] {
			return fmt.Errorf("op %q is placed on %q, which is not among the plan's devices", op.Name, op.Device)
		}
		if op.EndMS < op.StartMS {
			return fmt.Errorf("op %q ends (%g ms) before it starts (%g ms)", op.Name, op.EndMS, op.StartMS)
		}
	}
	for _, t := range p.Transfers {
		if !devs[t.From] || !devs[t.To] {
			return fmt.Errorf("transfer of %q goes from %q to %q, not both among the plan's devices", t.Tensor, t.From, t.To)
		}
	}
	if p.PredictedStepMS < 0 {
		return fmt.Errorf("negative predicted step %g ms", p.PredictedStepMS)
	}
	return nil
}
