// Package export turns a plan document into what a training runtime
// consumes: the split points of torch.distributed.pipelining, the layer
// partition and configuration of DeepSpeed, Megatron-LM's arguments,
// PyTorch's launch and DDP/FSDP/tensor-parallel settings, where each rank
// runs, the op-to-device map of a TensorFlow graph. It reads plans only through package plan, and each
// target is one file whose init registers it, so adding a target is
// adding one file.
package export

import (
	"bytes"
	"fmt"
	"io"

	"github.com/opplace/opplace/internal/registry"
	"github.com/opplace/opplace/plan"
)

// Target writes one runtime's artefact of a plan.
type Target interface {
	// Export writes the artefact of p to w, or returns an *Error when
	// the plan cannot be expressed in the runtime's terms.
	Export(w io.Writer, p *plan.Plan, o Options) error
}

// Options are what a target needs beyond the plan.
type Options struct {
	// Source is the plan file's path as the user gave it: messages and
	// headers name it.
	Source string
	// DeviceTemplate renders a device as a TensorFlow device string
	// (tf-device-map; empty for tfdevice.DefaultTemplate).
	DeviceTemplate string
}

// source names the plan in messages.
func (o Options) source() string {
	if o.Source == "" {
		return "the plan"
	}
	return o.Source
}

// Error is a plan that cannot be exported as asked: an unreadable or
// corrupt plan file, an unknown target, a plan the target cannot express
// (one stage for a pipeline runtime, stages cut inside a module). The
// cause is the input, so callers map it to the invalid-input exit code.
type Error struct {
	// Kind says what would fix it, for a caller to say how in its own
	// terms (the command line names its flags).
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Kind is what a refused export needs.
type Kind int

const (
	// Invalid: the plan file cannot be read, is no plan, or the target
	// is unknown.
	Invalid Kind = iota
	// OneStage: the plan has one stage; a pipeline strategy's plan has
	// split points.
	OneStage
	// OpCuts: the stages start or end inside a module; a plan whose
	// stages are cut between modules exports.
	OpCuts
	// NoModules: the op names carry no module paths to name the stages
	// by.
	NoModules
)

// errorf is an *Error of kind k with a formatted message.
func errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, args...)}
}

var targets = registry.New[Target]("export target")

// Register adds a target under name; it panics on a duplicate name, which
// is a programming error caught at init.
func Register(name, summary string, f func() Target) { targets.Register(name, summary, f) }

// Names lists the registered targets, sorted.
func Names() []string { return targets.Names() }

// Summary is the one-line description a target registered with.
func Summary(name string) string { return targets.Summary(name) }

// New makes the target registered under name; an unknown name is an
// *Error that lists the targets.
func New(name string) (Target, error) {
	t, err := targets.New(name)
	if err != nil {
		return nil, &Error{Err: err}
	}
	return t, nil
}

// ReadPlan reads a plan file (JSON or YAML); every failure is an *Error
// naming the file.
func ReadPlan(path string) (*plan.Plan, error) {
	p, err := plan.ReadFile(path)
	if err != nil {
		return nil, &Error{Err: err}
	}
	return p, nil
}

// Render is the artefact of p for the target registered under name, in
// full, so a plan the target refuses leaves nothing half written.
func Render(name string, p *plan.Plan, o Options) ([]byte, error) {
	t, err := New(name)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Export(&b, p, o); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// File reads the plan at path and renders it for the target name.
func File(name, path string, o Options) ([]byte, error) {
	if _, err := New(name); err != nil {
		return nil, err
	}
	p, err := ReadPlan(path)
	if err != nil {
		return nil, err
	}
	if o.Source == "" {
		o.Source = path
	}
	return Render(name, p, o)
}
