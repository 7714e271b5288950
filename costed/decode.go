package costed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
)

// Error is a problem in a costed graph file, located by its JSON path.
type Error struct {
	File string
	// Path locates the value, as in "ops[12].times_ms"; empty for the
	// document as a whole.
	Path string
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.File + ": " + e.Msg
	}
	return e.File + ": " + e.Path + ": " + e.Msg
}

func errorf(file, path, format string, args ...any) *Error {
	return &Error{File: file, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// maxBytes bounds every byte count: more than 1 PiB for one op is a unit
// mistake (the same bound the cluster files use for memory).
const maxBytes = 1 << 50

// The raw forms keep what encoding/json cannot: absent versus null versus
// zero, and numbers as written, so a byte count may be 1e9 but not 1.5.
type rawFile struct {
	Format *string           `json:"format"`
	Name   string            `json:"name"`
	Ops    []json.RawMessage `json:"ops"`
	Edges  []json.RawMessage `json:"edges"`
}

type rawOp struct {
	Name        *string             `json:"name"`
	Type        string              `json:"type"`
	Phase       string              `json:"phase"`
	Colocate    string              `json:"colocate"`
	TimesMS     map[string]*float64 `json:"times_ms"`
	ParamBytes  json.Number         `json:"param_bytes"`
	OutputBytes json.Number         `json:"output_bytes"`
	TempBytes   json.Number         `json:"temp_bytes"`
}

type rawEdge struct {
	From       *string      `json:"from"`
	To         *string      `json:"to"`
	Bytes      *json.Number `json:"bytes"`
	TransferMS *float64     `json:"transfer_ms"`
}

// Parse decodes an opplace-costed-graph/v1 document and checks it; file
// names it in errors. It does not build the graph: see Build.
func Parse(data []byte, file string) (*File, error) {
	var raw rawFile
	if err := decodeStrict(data, &raw, file, ""); err != nil {
		return nil, err
	}
	switch {
	case raw.Format == nil:
		return nil, errorf(file, "format", "missing; a costed graph starts with \"format\": %q", FormatV1)
	case *raw.Format != FormatV1:
		return nil, errorf(file, "format", "%q is not a format this opplace reads; it reads %q", *raw.Format, FormatV1)
	}
	f := &File{Format: *raw.Format, Name: raw.Name, Ops: make([]Op, len(raw.Ops))}
	for i, m := range raw.Ops {
		path := fmt.Sprintf("ops[%d]", i)
		var r rawOp
		if err := decodeStrict(m, &r, file, path); err != nil {
			return nil, err
		}
		op := &f.Ops[i]
		if r.Name != nil {
			op.Name = *r.Name
		}
		op.Type, op.Phase, op.Colocate = r.Type, r.Phase, r.Colocate
		if r.TimesMS != nil {
			op.TimesMS = make(map[string]float64, len(r.TimesMS))
			for k, v := range r.TimesMS {
				if v != nil { // null: no time, like a missing key
					op.TimesMS[k] = *v
				}
			}
		}
		var err error
		if op.ParamBytes, err = parseByteCount(r.ParamBytes, file, path+".param_bytes"); err != nil {
			return nil, err
		}
		if op.OutputBytes, err = parseByteCount(r.OutputBytes, file, path+".output_bytes"); err != nil {
			return nil, err
		}
		if op.TempBytes, err = parseByteCount(r.TempBytes, file, path+".temp_bytes"); err != nil {
			return nil, err
		}
	}
	for i, m := range raw.Edges {
		path := fmt.Sprintf("edges[%d]", i)
		var r rawEdge
		if err := decodeStrict(m, &r, file, path); err != nil {
			return nil, err
		}
		e := Edge{TransferMS: r.TransferMS}
		if r.From == nil {
			return nil, errorf(file, path+".from", "missing; every edge names the op it comes from")
		}
		if r.To == nil {
			return nil, errorf(file, path+".to", "missing; every edge names the op it goes to")
		}
		e.From, e.To = *r.From, *r.To
		if r.Bytes != nil {
			b, err := parseByteCount(*r.Bytes, file, path+".bytes")
			if err != nil {
				return nil, err
			}
			e.Bytes = &b
		}
		f.Edges = append(f.Edges, e)
	}
	if err := f.Validate(file); err != nil {
		return nil, err
	}
	return f, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data, and reports failures at path.
func decodeStrict(data []byte, v any, file, path string) error {
	return decodeJSON(data, v, file, path, true)
}

// decodeJSON is decodeStrict that may let unknown fields pass.
func decodeJSON(data []byte, v any, file, path string, strict bool) error {
	d := json.NewDecoder(bytes.NewReader(data))
	if strict {
		d.DisallowUnknownFields()
	}
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return describe(data, err, v, file, path)
	}
	end := d.InputOffset()
	if _, err := d.Token(); err != io.EOF {
		rest := bytes.TrimLeft(data[end:], " \t\r\n")
		return errorf(file, path, "unexpected data after the JSON object at line %s", lineCol(data, int64(len(data)-len(rest))))
	}
	return nil
}

// describe turns an encoding/json error into an Error with a JSON path.
func describe(data []byte, err error, v any, file, path string) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return errorf(file, path, "no JSON object: the file is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(file, path, "the JSON ends early: the file is truncated")
	case errors.As(err, &syn):
		// Offset counts the offending byte.
		return errorf(file, path, "invalid JSON at line %s: %s", lineCol(data, syn.Offset-1), syn.Error())
	case errors.As(err, &typ):
		p := join(path, typ.Field)
		if p == path && path == "" {
			return errorf(file, path, "expected a JSON object, got %s", typ.Value)
		}
		return errorf(file, p, "expected %s, got %s", kindName(typ.Type), typ.Value)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return errorf(file, path, "unknown field %s (known: %s)", name, strings.Join(jsonFields(v), ", "))
	}
	return errorf(file, path, "%s", msg)
}

func join(path, field string) string {
	switch {
	case field == "":
		return path
	case path == "":
		return field
	}
	return path + "." + field
}

// kindName says in words what JSON a Go type takes.
func kindName(t reflect.Type) string {
	if t == reflect.TypeFor[json.Number]() {
		return "a number"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Float64, reflect.Int64, reflect.Int, reflect.Int32:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return t.String()
}

// jsonFields lists the JSON keys of the struct v points to.
func jsonFields(v any) []string {
	t := reflect.TypeOf(v).Elem()
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// lineCol renders a byte offset as "line:column", both from 1.
func lineCol(data []byte, off int64) string {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int64(len(before)) - int64(bytes.LastIndexByte(before, '\n'))
	return fmt.Sprintf("%d:%d", line, col)
}

// parseByteCount reads a byte count written as a JSON number; absent is
// zero. Whole numbers in float notation (1e9, 131325952.0) are accepted,
// fractions are not. Negative counts are left to Validate.
func parseByteCount(n json.Number, file, path string) (int64, error) {
	s := n.String()
	if s == "" {
		return 0, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i > maxBytes {
			return 0, errorf(file, path, "%s bytes is over 1 PiB: is it in bytes?", s)
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		return 0, errorf(file, path, "%q is not a number of bytes", s)
	case f != math.Trunc(f):
		return 0, errorf(file, path, "%s is not a whole number of bytes", s)
	case f > maxBytes:
		return 0, errorf(file, path, "%s bytes is over 1 PiB: is it in bytes?", s)
	}
	return int64(f), nil
}

// Validate checks what the JSON decoder cannot: names present and unique,
// numbers in range, phases known, edges between known ops. It does not
// look for cycles; Build does. file names the document in errors.
func (f *File) Validate(file string) error {
	if len(f.Ops) == 0 {
		return errorf(file, "ops", "no ops; a costed graph lists at least one")
	}
	index := make(map[string]int, len(f.Ops))
	for i := range f.Ops {
		op := &f.Ops[i]
		path := fmt.Sprintf("ops[%d]", i)
		if op.Name == "" {
			return errorf(file, path+".name", "missing; every op needs a unique name")
		}
		if j, dup := index[op.Name]; dup {
			return errorf(file, path+".name", "%q is already the name of ops[%d]; op names must be unique", op.Name, j)
		}
		index[op.Name] = i
		if _, ok := parsePhase(op.Phase); !ok {
			return errorf(file, path+".phase", "%q is not a phase: use forward, backward or update", op.Phase)
		}
		if err := checkTimes(op.TimesMS, file, path+".times_ms"); err != nil {
			return err
		}
		for _, b := range []struct {
			field string
			n     int64
		}{{"param_bytes", op.ParamBytes}, {"output_bytes", op.OutputBytes}, {"temp_bytes", op.TempBytes}} {
			if b.n < 0 {
				return errorf(file, path+"."+b.field, "negative byte count %d", b.n)
			}
		}
	}
	type pair struct{ from, to int }
	seen := map[pair]int{}
	for i := range f.Edges {
		e := &f.Edges[i]
		path := fmt.Sprintf("edges[%d]", i)
		from, ok := index[e.From]
		if !ok {
			return errorf(file, path+".from", "no op is named %q", e.From)
		}
		to, ok := index[e.To]
		if !ok {
			return errorf(file, path+".to", "no op is named %q", e.To)
		}
		if from == to {
			return errorf(file, path, "from and to are both %q: an op cannot feed itself", e.From)
		}
		if j, dup := seen[pair{from, to}]; dup {
			return errorf(file, path, "a second edge from %q to %q (edges[%d]); give one edge with the bytes summed", e.From, e.To, j)
		}
		seen[pair{from, to}] = i
		if e.Bytes != nil && *e.Bytes < 0 {
			return errorf(file, path+".bytes", "negative byte count %d", *e.Bytes)
		}
		if e.TransferMS != nil && !(*e.TransferMS >= 0 && !math.IsInf(*e.TransferMS, 1)) {
			return errorf(file, path+".transfer_ms", "negative time %v", *e.TransferMS)
		}
	}
	return nil
}

// checkTimes checks one op's times: at least one, none negative, no two
// keys naming one device type (names ignore case, as in cluster files).
func checkTimes(times map[string]float64, file, path string) error {
	if len(times) == 0 {
		return errorf(file, path, "no time for any device type, so the op could run nowhere; give e.g. {\"V100-16GB\": 1.5} (milliseconds)")
	}
	keys := make([]string, 0, len(times))
	for k := range times {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same problem on every run
	lower := make(map[string]string, len(keys))
	for _, k := range keys {
		v := times[k]
		switch {
		case strings.TrimSpace(k) == "":
			return errorf(file, path, "an empty device type name")
		case !(v >= 0) || math.IsInf(v, 1):
			return errorf(file, path+"."+k, "negative time %v", v)
		}
		if prev, dup := lower[strings.ToLower(k)]; dup {
			return errorf(file, path, "%q and %q name one device type (names ignore case)", prev, k)
		}
		lower[strings.ToLower(k)] = k
	}
	return nil
}

func parsePhase(s string) (graph.Phase, bool) {
	switch strings.ToLower(s) {
	case "", "forward":
		return graph.Forward, true
	case "backward":
		return graph.Backward, true
	case "update":
		return graph.Update, true
	}
	return 0, false
}
