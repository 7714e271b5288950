package costed

import (
	"errors"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// parser reads an opplace-costed-graph/v1 document from a scanner into a
// File, one op and one edge at a time. It checks JSON types and unknown
// keys as it goes; File.check does the rest.
type parser struct {
	s    *scanner
	file string
	// Strings many ops repeat (device type names, op types, phases) are
	// kept once.
	interned map[string]string
	devTypes []string
	// times is a block the ops' times are carved from: one allocation
	// per few thousand ops instead of one per op.
	times []DeviceTime
	// index maps each op name to its first op, as check needs it, built
	// while the ops are read; ops are the ops once read. An edge listed
	// after them is resolved as it is read, its names shared with the
	// ops' (a million edges would otherwise allocate two million names
	// and look each up again), and an endpoint equal to the previous
	// edge's is not looked up at all.
	index    *nameIndex
	read     []Op
	ends     chunks[ends]
	lastName [2]string
	lastEnd  [2]int32
	// dup is the first op whose name an earlier op has, and that op (0, 0
	// for none: ops[0] cannot repeat a name).
	dup [2]int32
	// parallel: the ops and edges are parsed on several goroutines
	// (parallel.go).
	parallel bool
	// compact: the times are appended to one growing slice, ops'
	// slices of it, for compactTimes to copy into one of their exact size.
	compact bool
	// lines: the parallel parse cuts an element that looks like a line
	// of its own at the line's end (parallel.go).
	lines bool
	// size is the document's length in bytes where known (0 where not),
	// from which the parallel parse sizes its lists.
	size int64
}

var (
	topFields  = []string{"format", "name", "ops", "edges"}
	opFields   = []string{"name", "type", "phase", "colocate", "device", "times_ms", "param_bytes", "output_bytes", "temp_bytes"}
	edgeFields = []string{"from", "to", "tensor", "bytes", "transfer_ms"}
)

// parseV1 reads a v1 document from r without checking it beyond JSON
// types; file names it in errors. When r can be read again from its
// start, the ops and edges are parsed on several goroutines, and a
// document that does not parse cleanly that way is read again on one,
// for its messages.
func parseV1(r io.Reader, file string) (*File, error) {
	// Reading again needs a seekable r.
	if sk, ok := r.(io.Seeker); ok && parseWorkers() > 1 {
		f, err := parseV1With(r, file, true)
		if !errors.Is(err, errSplit) {
			return f, err
		}
		if _, err := sk.Seek(0, io.SeekStart); err != nil {
			return nil, errorf(file, "", "cannot read the graph again: %v", err)
		}
	}
	return parseV1With(r, file, false)
}

// parseV1With is parseV1 on one goroutine or, with parallel, its ops and
// edges on several (failing with errSplit where one goroutine is needed):
// first with elements cut at line ends and, if that was wrong and r can
// be read again, by their braces (parallel.go).
func parseV1With(r io.Reader, file string, parallel bool) (*File, error) {
	f, err := parseV1Split(r, file, parallel, parallel)
	if sk, ok := r.(io.Seeker); ok && errors.Is(err, errLines) {
		if _, err := sk.Seek(0, io.SeekStart); err != nil {
			return nil, errorf(file, "", "cannot read the graph again: %v", err)
		}
		return parseV1Split(r, file, parallel, false)
	}
	return f, err
}

// parseV1Split is parseV1With, the parallel parse cutting elements at
// line ends where lines is set.
func parseV1Split(r io.Reader, file string, parallel, lines bool) (*File, error) {
	p := &parser{s: newScanner(r, file), file: file, interned: map[string]string{}, lastEnd: [2]int32{-1, -1}, parallel: parallel, lines: lines, size: sizeOf(r)}
	f, err := p.document()
	if err != nil {
		return nil, err
	}
	f.index, f.ends, f.dup = p.index, p.ends.flat(), p.dup
	return f, nil
}

// sizeOf is the length of what r reads, where r says (a bytes.Reader, an
// os.File), or 0.
func sizeOf(r io.Reader) int64 {
	switch r := r.(type) {
	case interface{ Size() int64 }:
		return r.Size()
	case interface{ Stat() (os.FileInfo, error) }:
		if st, err := r.Stat(); err == nil && st.Mode().IsRegular() {
			return st.Size()
		}
	}
	return 0
}

// loc locates a value in the document, as "ops[12].times_ms.T4", for
// messages: a value, so that a million values located cost nothing until
// one is wrong.
type loc struct {
	list  string // "ops" or "edges", or "" for a key of the document
	index int
	field string
	key   string // inside an object field (times_ms)
}

// in is the location of a field of l's item.
func (l loc) in(field string) loc { l.field = field; return l }

// of is the location of a key of l's field.
func (l loc) of(key string) loc { l.key = key; return l }

func (l loc) String() string {
	s := l.field
	if l.list != "" {
		s = l.list + "[" + strconv.Itoa(l.index) + "]"
		if l.field != "" {
			s += "." + l.field
		}
	}
	if l.key != "" {
		s += "." + l.key
	}
	return s
}

// once refuses a key of fields that the object at at gave before (seen
// has a bit for each field read): JSON leaves a repeated key's meaning
// to the reader (encoding/json keeps the last), so a file that repeats
// one means two things. Keys not in fields are left to the caller.
func (p *parser) once(seen *uint32, fields []string, at loc, key []byte) error {
	i := slices.Index(fields, unsafeString(key))
	if i < 0 {
		return nil
	}
	if *seen&(1<<i) != 0 {
		return p.dupKey(at.in(fields[i]), key)
	}
	*seen |= 1 << i
	return nil
}

// dupKey is the error for a key an object gives twice, on the line of
// the scanner's position (just after the second one).
func (p *parser) dupKey(at loc, key []byte) error {
	line, _, _ := strings.Cut(p.s.where(p.s.pos), ":")
	return dupKeyError(p.file, at.String(), string(key), line)
}

func (p *parser) typeErr(at loc, want, got string) error {
	return errorf(p.file, at.String(), "expected %s, got %s", want, got)
}

func unknownField(file string, at loc, key []byte, known []string) error {
	return errorf(file, at.String(), "unknown field %q (known: %s)", key, strings.Join(known, ", "))
}

func (p *parser) document() (*File, error) {
	s := p.s
	if _, ok := s.peek(); !ok && s.rerr == nil {
		return nil, errorf(p.file, "", "no JSON object: the file is empty")
	}
	k, err := s.value()
	if err != nil {
		return nil, err
	}
	if k != "object" {
		return nil, errorf(p.file, "", "expected a JSON object, got %s", k)
	}
	s.pos++
	f := &File{}
	format := false
	var seen uint32
	for first := true; ; first = false {
		more, err := s.next(first, '}')
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		key, err := s.key()
		if err != nil {
			return nil, err
		}
		if err := p.once(&seen, topFields, loc{}, key); err != nil {
			return nil, err
		}
		switch string(key) {
		case "format":
			v, ok, err := p.str(loc{field: "format"})
			if err != nil {
				return nil, err
			}
			if ok {
				// Refuse another version before reading its ops as v1's.
				if v != FormatV1 {
					return nil, errorf(p.file, "format", "%q is not a format this opplace reads; it reads %q", v, FormatV1)
				}
				f.Format, format = v, true
			} else {
				f.Format, format = "", false
			}
		case "name":
			if f.Name, _, err = p.str(loc{field: "name"}); err != nil {
				return nil, err
			}
		case "ops":
			p.dup = [2]int32{}
			if p.parallel {
				f.Ops, err = p.opsParallel()
			} else {
				f.Ops, err = p.ops()
			}
			if err != nil {
				return nil, err
			}
			p.read = f.Ops
			p.ends = chunks[ends]{} // edges read before refer to no ops yet
		case "edges":
			p.ends = chunks[ends]{}
			if p.parallel {
				f.Edges, err = p.edgesParallel()
			} else {
				f.Edges, err = p.edges()
			}
			if err != nil {
				return nil, err
			}
		default:
			return nil, unknownField(p.file, loc{}, key, topFields)
		}
	}
	if err := s.finish(); err != nil {
		return nil, err
	}
	if !format {
		return nil, errorf(p.file, "format", "missing; a costed graph starts with \"format\": %q", FormatV1)
	}
	return f, nil
}

// array reads an array (or null, as empty), calling item for each
// element with its index.
func (p *parser) array(at loc, item func(i int) error) error {
	s := p.s
	k, err := s.value()
	if err != nil {
		return err
	}
	switch k {
	case "null":
		return s.literal()
	case "array":
	default:
		return p.typeErr(at, "an array", k)
	}
	s.pos++
	for i := 0; ; i++ {
		more, err := s.next(i == 0, ']')
		if err != nil || !more {
			return err
		}
		if err := item(i); err != nil {
			return err
		}
	}
}

// object reads an object (or null, reported by null), calling member for
// each key; the key's bytes are valid until member reads its value.
func (p *parser) object(at loc, member func(key []byte) error) (null bool, err error) {
	s := p.s
	k, err := s.value()
	if err != nil {
		return false, err
	}
	switch k {
	case "null":
		return true, s.literal()
	case "object":
	default:
		return false, p.typeErr(at, "an object", k)
	}
	s.pos++
	for first := true; ; first = false {
		more, err := s.next(first, '}')
		if err != nil || !more {
			return false, err
		}
		key, err := s.key()
		if err != nil {
			return false, err
		}
		if err := member(key); err != nil {
			return false, err
		}
	}
}

// str reads a string; ok is false for null.
func (p *parser) str(at loc) (v string, ok bool, err error) {
	b, ok, err := p.strBytes(at)
	return string(b), ok, err
}

// strBytes is str without the copy: the bytes are valid until the
// scanner reads on.
func (p *parser) strBytes(at loc) ([]byte, bool, error) {
	return p.scalar(at, "string", "a string", p.s.str)
}

// scalar reads a value of kind (as scanner.kind names it) with read;
// ok is false for null, and another kind is an error saying what was
// wanted.
func (p *parser) scalar(at loc, kind, want string, read func() ([]byte, error)) ([]byte, bool, error) {
	k, err := p.s.value()
	switch {
	case err != nil:
		return nil, false, err
	case k == "null":
		return nil, false, p.s.literal()
	case k != kind:
		return nil, false, p.typeErr(at, want, k)
	}
	b, err := read()
	return b, true, err
}

// intern reads a string that many ops repeat.
func (p *parser) intern(at loc) (string, error) {
	b, _, err := p.strBytes(at)
	if err != nil {
		return "", err
	}
	if v, ok := p.interned[unsafeString(b)]; ok {
		return v, nil
	}
	v := string(b)
	p.interned[v] = v
	return v, nil
}

// num reads a number's text; ok is false for null.
func (p *parser) num(at loc) ([]byte, bool, error) {
	return p.scalar(at, "number", "a number", p.s.number)
}

// float reads a number as a float64; ok is false for null.
func (p *parser) float(at loc) (float64, bool, error) {
	b, ok, err := p.num(at)
	if err != nil || !ok {
		return 0, ok, err
	}
	v, err := parseFloat(b)
	if err != nil {
		return 0, false, errorf(p.file, at.String(), "%s is out of range for a number", b)
	}
	return v, true, nil
}

// parseFloat is strconv.ParseFloat(b, 64) of a JSON number, b. The
// numbers of a costed graph are mostly short decimals ("0.0051"), which
// it converts itself: a whole number of at most 15 digits (so exactly a
// float64) divided by a power of ten up to 10^22 (also exact) is, by
// IEEE division, the correctly rounded value strconv gives (Clinger's
// fast path, which strconv takes too, after more work). Anything else
// (an exponent, more digits) goes to strconv.
func parseFloat(b []byte) (float64, error) {
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		i, neg = 1, true
	}
	var m uint64
	nd, exp, dot := 0, 0, false
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case '0' <= c && c <= '9':
			m = m*10 + uint64(c-'0')
			nd++
			if dot {
				exp--
			}
		case c == '.' && !dot:
			dot = true
		default:
			return strconv.ParseFloat(unsafeString(b), 64)
		}
		if nd > 15 {
			return strconv.ParseFloat(unsafeString(b), 64)
		}
	}
	if nd == 0 || exp < -22 {
		return strconv.ParseFloat(unsafeString(b), 64)
	}
	f := float64(m)
	if exp < 0 {
		f /= pow10[-exp]
	}
	if neg {
		f = -f
	}
	return f, nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// bytes reads a byte count: absent or null is zero. Whole numbers in
// float notation (1e9, 131325952.0) are accepted, fractions are not.
// Negative counts are left to check, which names the op.
func (p *parser) bytes(at loc) (int64, bool, error) {
	b, ok, err := p.num(at)
	if err != nil || !ok {
		return 0, ok, err
	}
	n, err := parseByteCount(b, p.file, at)
	return n, true, err
}

func (p *parser) ops() ([]Op, error) {
	var ops chunks[Op]
	err := p.array(loc{field: "ops"}, func(i int) error {
		return p.op(ops.next(), i)
	})
	if err != nil {
		return nil, err
	}
	return p.indexOps(ops.flat()), nil
}

// indexOps fills p.index and p.dup for the ops and returns them.
func (p *parser) indexOps(all []Op) []Op {
	// The index, sized once; a repeated name (an error check reports)
	// keeps its first op.
	p.index = newNameIndex(all)
	for i := range all {
		if all[i].Name != "" {
			if j, ok := p.index.add(int32(i)); !ok && p.dup[0] == 0 {
				p.dup = [2]int32{int32(i), j}
			}
		}
	}
	return all
}

// chunks collects a list of unknown length in blocks and copies it once
// into a slice of its exact size: growing one slice by append would copy
// a million ops about twice and leave as much garbage.
type chunks[T any] struct {
	done [][]T
	cur  []T
	n    int
}

// next appends a zero element and returns it.
func (c *chunks[T]) next() *T {
	if len(c.cur) == cap(c.cur) {
		if c.cur != nil {
			c.done = append(c.done, c.cur)
		}
		c.cur = make([]T, 0, min(max(64, 2*cap(c.cur)), 1<<14))
	}
	c.cur = c.cur[:len(c.cur)+1]
	c.n++
	return &c.cur[len(c.cur)-1]
}

func (c *chunks[T]) flat() []T {
	if len(c.done) == 0 {
		return c.cur // small lists: no copy
	}
	out := make([]T, 0, c.n)
	for _, b := range c.done {
		out = append(out, b...)
	}
	return append(out, c.cur...)
}

func (p *parser) op(op *Op, i int) error {
	at := loc{list: "ops", index: i}
	var seen uint32
	_, err := p.object(at, func(key []byte) error {
		if err := p.once(&seen, opFields, at, key); err != nil {
			return err
		}
		var err error
		switch string(key) {
		case "name":
			op.Name, _, err = p.str(at.in("name"))
		case "type":
			op.Type, err = p.intern(at.in("type"))
		case "phase":
			op.Phase, err = p.intern(at.in("phase"))
		case "colocate":
			op.Colocate, _, err = p.str(at.in("colocate"))
		case "device":
			op.Device, err = p.intern(at.in("device"))
		case "times_ms":
			op.TimesMS, err = p.timesMS(at.in("times_ms"))
		case "param_bytes":
			op.ParamBytes, _, err = p.bytes(at.in("param_bytes"))
		case "output_bytes":
			op.OutputBytes, _, err = p.bytes(at.in("output_bytes"))
		case "temp_bytes":
			op.TempBytes, _, err = p.bytes(at.in("temp_bytes"))
		default:
			err = unknownField(p.file, at, key, opFields)
		}
		return err
	})
	return err
}

// timesMS reads an op's times; a null time is no time, like a missing
// key.
func (p *parser) timesMS(at loc) (Times, error) {
	start := len(p.times)
	if cap(p.times)-start < 64 && !p.compact {
		p.times, start = make([]DeviceTime, 0, 4096), 0
	}
	_, err := p.object(at, func(key []byte) error {
		name := p.devType(key)
		v, ok, err := p.float(at.of(name))
		if ok {
			p.times = append(p.times, DeviceTime{Type: name, MS: v})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(p.times) == start {
		return nil, nil
	}
	t := p.times[start:len(p.times):len(p.times)]
	return t, nil
}

// devType interns a device type name: a file names a few types, once per
// op each.
func (p *parser) devType(key []byte) string {
	for _, t := range p.devTypes {
		if t == unsafeString(key) {
			return t
		}
	}
	t := string(key)
	if len(p.devTypes) < 64 {
		p.devTypes = append(p.devTypes, t)
	}
	return t
}

func (p *parser) edges() ([]Edge, error) {
	var edges chunks[Edge]
	err := p.array(loc{field: "edges"}, func(i int) error {
		return p.edge(edges.next(), p.ends.next(), i)
	})
	return edges.flat(), err
}

// edge reads edge i into e and its ends into x.
func (p *parser) edge(e *Edge, x *ends, i int) error {
	at := loc{list: "edges", index: i}
	var from, to bool
	*x = ends{-1, -1}
	var seen uint32
	_, err := p.object(at, func(key []byte) error {
		if err := p.once(&seen, edgeFields, at, key); err != nil {
			return err
		}
		var err error
		switch string(key) {
		case "from":
			e.From, x.from, from, err = p.endpoint(at.in("from"), 0)
		case "to":
			e.To, x.to, to, err = p.endpoint(at.in("to"), 1)
		case "tensor":
			e.Tensor, _, err = p.str(at.in("tensor"))
		case "bytes":
			var b int64
			var ok bool
			if b, ok, err = p.bytes(at.in("bytes")); ok {
				e.Bytes = &b
			} else {
				e.Bytes = nil
			}
		case "transfer_ms":
			var v float64
			var ok bool
			if v, ok, err = p.float(at.in("transfer_ms")); ok {
				e.TransferMS = &v
			} else {
				e.TransferMS = nil
			}
		default:
			err = unknownField(p.file, at, key, edgeFields)
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case !from:
		return errorf(p.file, at.in("from").String(), "missing; every edge names the op it comes from")
	case !to:
		return errorf(p.file, at.in("to").String(), "missing; every edge names the op it goes to")
	}
	return nil
}

// endpoint reads an edge's from (which 0) or to (1): the op's name and
// its index, or -1 when no op read so far has that name.
func (p *parser) endpoint(at loc, which int) (string, int32, bool, error) {
	b, ok, err := p.strBytes(at)
	if err != nil || !ok {
		return "", -1, ok, err
	}
	if string(b) == p.lastName[which] && p.lastEnd[which] >= 0 {
		return p.lastName[which], p.lastEnd[which], true, nil
	}
	// Edges are mostly listed in their ops' order: before the index, try
	// the op after the last one named here, and for a from the last to.
	// Only while no two ops share a name, so an op found by its name is
	// the one the index would give.
	j, found := int32(-1), false
	if p.dup[0] == 0 && len(b) > 0 {
		next := p.lastEnd[which] + 1
		switch {
		case next > 0 && int(next) < len(p.read) && p.read[next].Name == unsafeString(b):
			j, found = next, true
		case which == 0 && p.lastEnd[1] >= 0 && int(p.lastEnd[1]) < len(p.read) && p.read[p.lastEnd[1]].Name == unsafeString(b):
			j, found = p.lastEnd[1], true
		}
	}
	if !found {
		j, found = p.index.find(unsafeString(b))
	}
	if !found {
		return string(b), -1, true, nil
	}
	name := p.read[j].Name
	p.lastName[which], p.lastEnd[which] = name, j
	return name, j, true, nil
}

// parseByteCount reads a byte count written as a JSON number. Whole
// numbers in float notation (1e9, 131325952.0) are accepted, fractions
// are not. Negative counts are left to check.
func parseByteCount(b []byte, file string, at loc) (int64, error) {
	s := unsafeString(b)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i > maxBytes {
			return 0, errorf(file, at.String(), "%s bytes is over 1 PiB: is it in bytes?", b)
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !math.IsInf(f, 0):
		return 0, errorf(file, at.String(), "%q is not a number of bytes", b)
	case f < 0:
		return 0, errorf(file, at.String(), "negative byte count %s", b)
	case f > maxBytes:
		return 0, errorf(file, at.String(), "%s bytes is over 1 PiB: is it in bytes?", b)
	case f != math.Trunc(f):
		return 0, errorf(file, at.String(), "%s is not a whole number of bytes", b)
	}
	return int64(f), nil
}
