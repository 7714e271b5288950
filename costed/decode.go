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

// maxMS bounds a time in milliseconds: more than a day for one op or one
// transfer is a unit mistake or garbage, and a sum of such times would
// overflow to +Inf in the simulator.
const maxMS = 24 * 60 * 60 * 1e3

// maxTotalBytes bounds the sum of a graph's byte counts, so that the
// memory any device holds cannot overflow an int64.
const maxTotalBytes = 1 << 62

// Parse decodes an opplace-costed-graph/v1 document and checks it; file
// names it in errors. It does not build the graph: see Build.
func Parse(data []byte, file string) (*File, error) {
	f, err := parseV1(bytes.NewReader(data), file)
	if err != nil {
		return nil, err
	}
	f.index, f.ends, f.dup = nil, nil, [2]int32{}
	if err := f.Validate(file); err != nil {
		return nil, err
	}
	return f, nil
}

// decodeJSON decodes one JSON value into v, refusing trailing data and,
// if strict, unknown fields, and reports failures at path. The
// dnn-partitioning reader uses it; v1 documents are read by parser.
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

// dupKeyError is the error for a key an object gives twice, the second
// time on line.
func dupKeyError(file, path, key, line string) *Error {
	return errorf(file, path, "key %q is given twice in one object, the second time on line %s: JSON readers keep either value, so the file means two things; keep one", key, line)
}

// checkDupKeys refuses a document one of whose objects gives a key twice,
// which encoding/json takes silently (the last value wins). A document
// that is not valid JSON passes: decoding it says what is wrong.
func checkDupKeys(data []byte, file string) error {
	type frame struct {
		obj     bool
		keys    map[string]bool
		key     string // the object's key being read
		index   int    // the array's element being read
		wantKey bool
	}
	var stack []*frame
	path := func() string {
		p := ""
		for _, f := range stack[:len(stack)-1] {
			if f.obj {
				p = join(p, f.key)
			} else {
				p += "[" + strconv.Itoa(f.index) + "]"
			}
		}
		return p
	}
	// done moves the innermost container past the value just read.
	done := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.obj {
			f.wantKey = true
		} else {
			f.index++
		}
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err != nil {
			return nil
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, &frame{obj: t == '{', keys: map[string]bool{}, wantKey: t == '{'})
			default:
				stack = stack[:len(stack)-1]
				done()
			}
			continue
		case string:
			if f := stack[len(stack)-1:]; len(f) == 1 && f[0].obj && f[0].wantKey {
				if f[0].keys[t] {
					line, _, _ := strings.Cut(lineCol(data, d.InputOffset()), ":")
					return dupKeyError(file, join(path(), t), t, line)
				}
				f[0].keys[t], f[0].key, f[0].wantKey = true, t, false
				continue
			}
		}
		done()
	}
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

// Validate checks what the JSON decoder cannot: names present and unique,
// numbers in range, phases known, edges between known ops. It does not
// look for cycles; Build does. file names the document in errors.
func (f *File) Validate(file string) error {
	_, err := f.check(file)
	return err
}

// ends are an edge's ops, as indices into File.Ops.
type ends struct{ from, to int32 }

// check is Validate; it returns each edge's ends for Build. Problems are
// reported in file order: the first op or edge that has one.
func (f *File) check(file string) ([]ends, error) {
	if len(f.Ops) == 0 {
		return nil, errorf(file, "ops", "no ops; a costed graph lists at least one")
	}
	if len(f.Ops) > math.MaxInt32 {
		return nil, errorf(file, "ops", "%d ops; opplace plans at most %d", len(f.Ops), math.MaxInt32)
	}
	index := f.index
	known := index != nil // built by the parser, which noted the first repeated name
	if !known {
		index = newNameIndex(f.Ops)
	}
	var total int64
	for i := range f.Ops {
		op := &f.Ops[i]
		at := loc{list: "ops", index: i}
		if op.Name == "" {
			return nil, errorf(file, at.in("name").String(), "missing; every op needs a unique name")
		}
		if known {
			if f.dup[0] == int32(i) && i > 0 {
				return nil, errorf(file, at.in("name").String(), "%q is already the name of ops[%d]; op names must be unique", op.Name, f.dup[1])
			}
		} else {
			if j, ok := index.add(int32(i)); !ok {
				return nil, errorf(file, at.in("name").String(), "%q is already the name of ops[%d]; op names must be unique", op.Name, j)
			}
		}
		if _, ok := parsePhase(op.Phase); !ok {
			return nil, errorf(file, at.in("phase").String(), "%q is not a phase: use forward, backward or update", op.Phase)
		}
		if err := checkTimes(op, file, at.in("times_ms")); err != nil {
			return nil, err
		}
		for _, b := range []struct {
			field string
			n     int64
		}{{"param_bytes", op.ParamBytes}, {"output_bytes", op.OutputBytes}, {"temp_bytes", op.TempBytes}} {
			switch {
			case b.n < 0:
				return nil, errorf(file, at.in(b.field).String(), "negative byte count %d", b.n)
			case b.n > maxBytes:
				return nil, errorf(file, at.in(b.field).String(), "%d bytes is over 1 PiB: is it in bytes?", b.n)
			}
			if total += b.n; total > maxTotalBytes {
				return nil, errorf(file, at.in(b.field).String(), "the byte counts of the ops up to %q add up to more than 2^62 bytes: are they in bytes?", op.Name)
			}
		}
	}
	// Each edge on its own first, stopping at the first bad one; then
	// duplicates among the edges before it, the earliest reported.
	e2 := make([]ends, len(f.Edges))
	bad, badErr := len(f.Edges), error(nil)
	for i := range f.Edges {
		if err := checkEdge(f, index, i, &e2[i], &total, file); err != nil {
			bad, badErr = i, err
			break
		}
	}
	index = nil // a million names: let it go before the graph is built
	if err := checkRepeats(f, e2[:bad], file); err != nil {
		return nil, err
	}
	if badErr != nil {
		return nil, badErr
	}
	return e2, nil
}

// checkRepeats reports the earliest edge that repeats an earlier one: the
// same ops and no tensor name, or the same ops and tensor name; or that
// names a tensor of its op an earlier edge gave other bytes or another
// transfer time.
func checkRepeats(f *File, e []ends, file string) error {
	named := false
	for i := range e {
		if f.Edges[i].Tensor != "" {
			named = true
			break
		}
	}
	if !named {
		if i, j := firstDuplicate(e, len(f.Ops)); i >= 0 {
			return repeatError(f, i, j, file)
		}
		return nil
	}
	// Unnamed edges by the counting sort, named ones (few) by a map.
	var unnamed []ends
	var at []int
	type pair struct {
		from, to int32
		name     string
	}
	type value struct {
		from int32
		name string
	}
	pairs := map[pair]int{}
	values := map[value]int{}
	first, firstOf, mismatch := -1, -1, false
	for i, x := range e {
		ed := &f.Edges[i]
		if ed.Tensor == "" {
			unnamed, at = append(unnamed, x), append(at, i)
			continue
		}
		if first >= 0 {
			continue
		}
		if j, dup := pairs[pair{x.from, x.to, ed.Tensor}]; dup {
			first, firstOf = i, j
			continue
		}
		pairs[pair{x.from, x.to, ed.Tensor}] = i
		if j, seen := values[value{x.from, ed.Tensor}]; seen {
			if !sameValue(f, &f.Edges[j], ed, x.from) {
				first, firstOf, mismatch = i, j, true
			}
			continue
		}
		values[value{x.from, ed.Tensor}] = i
	}
	if i, j := firstDuplicate(unnamed, len(f.Ops)); i >= 0 && (first < 0 || at[i] < first) {
		return repeatError(f, at[i], at[j], file)
	}
	switch {
	case first < 0:
		return nil
	case mismatch:
		ed := &f.Edges[first]
		return errorf(file, fmt.Sprintf("edges[%d]", first), "tensor %q of %q differs from edges[%d]'s in bytes or transfer_ms; every edge of one named tensor carries the same value", ed.Tensor, ed.From, firstOf)
	}
	return repeatError(f, first, firstOf, file)
}

// repeatError is the error for edge i repeating edge j.
func repeatError(f *File, i, j int, file string) error {
	e := &f.Edges[i]
	if e.Tensor != "" {
		return errorf(file, fmt.Sprintf("edges[%d]", i), "a second edge from %q to %q for tensor %q (edges[%d]); a tensor goes once to each op that reads it", e.From, e.To, e.Tensor, j)
	}
	return errorf(file, fmt.Sprintf("edges[%d]", i), "a second edge from %q to %q (edges[%d]); give one edge with the bytes summed, or name each edge's tensor (\"tensor\") when they carry different values", e.From, e.To, j)
}

// sameValue reports whether edges a and b, from the op from, carry the
// same bytes and transfer time.
func sameValue(f *File, a, b *Edge, from int32) bool {
	bytes := func(e *Edge) int64 {
		if e.Bytes != nil {
			return *e.Bytes
		}
		return f.Ops[from].OutputBytes
	}
	if bytes(a) != bytes(b) || (a.TransferMS == nil) != (b.TransferMS == nil) {
		return false
	}
	return a.TransferMS == nil || *a.TransferMS == *b.TransferMS
}

func checkEdge(f *File, index *nameIndex, i int, out *ends, total *int64, file string) error {
	e := &f.Edges[i]
	at := loc{list: "edges", index: i}
	from, to := int32(-1), int32(-1)
	if i < len(f.ends) {
		from, to = f.ends[i].from, f.ends[i].to
	}
	ok := true
	if from < 0 {
		if from, ok = index.find(e.From); !ok {
			return errorf(file, at.in("from").String(), "no op is named %q", e.From)
		}
	}
	if to < 0 {
		if to, ok = index.find(e.To); !ok {
			return errorf(file, at.in("to").String(), "no op is named %q", e.To)
		}
	}
	if from == to {
		return errorf(file, at.String(), "from and to are both %q: an op cannot feed itself", e.From)
	}
	if e.Bytes != nil {
		switch b := *e.Bytes; {
		case b < 0:
			return errorf(file, at.in("bytes").String(), "negative byte count %d", b)
		case b > maxBytes:
			return errorf(file, at.in("bytes").String(), "%d bytes is over 1 PiB: is it in bytes?", b)
		}
		if *total += *e.Bytes; *total > maxTotalBytes {
			return errorf(file, at.in("bytes").String(), "the byte counts of the ops and edges up to this one add up to more than 2^62 bytes: are they in bytes?")
		}
	}
	if v := e.TransferMS; v != nil && !(*v >= 0 && *v <= maxMS) {
		return msError(*v, file, at.in("transfer_ms"), fmt.Sprintf("the transfer from %q to %q", e.From, e.To))
	}
	*out = ends{from, to}
	return nil
}

// firstDuplicate finds the earliest edge i that repeats an earlier edge j
// between the same ops, or -1. Edges are bucketed by their source in file
// order (a counting sort) and a stamp per target spots a repeat, so a
// million edges need two int32 arrays, not a map of pairs.
func firstDuplicate(e []ends, nOps int) (int, int) {
	start := make([]int32, nOps+1)
	for _, x := range e {
		start[x.from+1]++
	}
	for i := range nOps {
		start[i+1] += start[i]
	}
	byFrom := make([]int32, len(e))
	fill := slices.Clone(start[:nOps])
	for i, x := range e {
		byFrom[fill[x.from]] = int32(i)
		fill[x.from]++
	}
	// stamp[to] is the index+1 of the last bucket that reached to, seen
	// the edge that did.
	stamp := make([]int32, nOps)
	seen := make([]int32, nOps)
	first, firstOf := -1, -1
	for from := range nOps {
		for _, k := range byFrom[start[from]:start[from+1]] {
			to := e[k].to
			if stamp[to] == int32(from)+1 {
				if first < 0 || int(k) < first {
					first, firstOf = int(k), int(seen[to])
				}
				continue
			}
			stamp[to], seen[to] = int32(from)+1, k
		}
	}
	return first, firstOf
}

// msError is the error for a time in milliseconds out of range (v < 0,
// NaN, or more than a day); what names whose time it is.
func msError(v float64, file string, at loc, what string) error {
	if !(v >= 0) {
		return errorf(file, at.String(), "negative time %v", v)
	}
	return errorf(file, at.String(), "%v ms for %s is more than a day (%v ms): times are in milliseconds", v, what, maxMS)
}

// checkTimes checks one op's times: at least one, each in range, no two
// keys naming one device type (names ignore case, as in cluster files).
func checkTimes(op *Op, file string, at loc) error {
	times := op.TimesMS
	if len(times) == 0 {
		return errorf(file, at.String(), "no time for any device type, so the op could run nowhere; give e.g. {\"V100-16GB\": 1.5} (milliseconds)")
	}
	for i, d := range times {
		if strings.TrimSpace(d.Type) == "" {
			return errorf(file, at.String(), "an empty device type name")
		}
		if !(d.MS >= 0 && d.MS <= maxMS) {
			return msError(d.MS, file, at.of(d.Type), fmt.Sprintf("op %q", op.Name))
		}
		for _, prev := range times[:i] {
			if len(prev.Type) == len(d.Type) && strings.EqualFold(prev.Type, d.Type) {
				if prev.Type == d.Type {
					return errorf(file, at.String(), "%q is given twice", d.Type)
				}
				return errorf(file, at.String(), "%q and %q name one device type (names ignore case)", prev.Type, d.Type)
			}
		}
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
