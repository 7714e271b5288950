package costed

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// A large document's ops and edges are parsed on several goroutines: the
// one reading the file cuts each list into batches of whole elements
// (objects, by their braces outside strings, which is several times
// faster than parsing them) and workers parse the batches with the
// parser's own code. Only a document that parses cleanly is read this
// way: at anything unexpected (a syntax or type error, an element that is
// not an object) the reader gives up, and parseV1 reads the file again
// from its start on one goroutine, so every message, and which problem
// is reported first, is the one-goroutine parser's.

// parseWorkers is how many goroutines parse batches; below 2 the lists
// are parsed where they are read. A variable so tests can compare both.
var parseWorkers = func() int { return runtime.GOMAXPROCS(0) }

// errSplit makes parseV1 read the document again on one goroutine.
var errSplit = errors.New("costed: parse the document again on one goroutine")

// errLines makes parseV1 read the document again on several goroutines,
// cutting elements by their braces: an element cut at a line end did not
// parse (perhaps it was not the whole element).
var errLines = fmt.Errorf("%w, or on several cutting no lines", errSplit)

// Batches are cut at about this many bytes or elements.
const (
	batchBytes = 1 << 20
	batchItems = 8192
)

// batch is a run of whole list elements, back to back.
type batch struct {
	seq   int // the batch's place in the list
	first int // index of its first element in the list
	n     int
	data  []byte
	// out is where the batch's elements go, set by parseList's alloc.
	out any
	// lines: some elements were cut at line ends.
	lines bool
}

// parseList reads the list (an array of objects, or null) at the scanner
// and hands its elements, batch by batch, to parse on parseWorkers
// goroutines; parse gets a worker's parser over the batch and puts its
// elements where alloc said. alloc is called for each batch in list
// order, on the reading goroutine, before any worker sees the batch;
// est is how many elements the list may have from the batch's first on,
// judged from the bytes left in the document (0 where its size is not
// known). It returns how many elements the list has (0 for null). Any
// error of the reading or of a worker is errSplit.
func parseList(p *parser, alloc func(b *batch, est int), parse func(w *parser, b *batch) error) (int, error) {
	s := p.s
	k, err := s.value()
	switch {
	case err != nil:
		return 0, errSplit
	case k == "null":
		if s.literal() != nil {
			return 0, errSplit
		}
		return 0, nil
	case k != "array":
		return 0, errSplit
	}
	s.pos++
	workers := parseWorkers()
	todo := make(chan *batch, 2*workers)
	// A batch's bytes are copied out as they are parsed, so its buffer is
	// used again: a 321 MB file allocates a few MB of them, not 321.
	spare := make(chan []byte, 3*workers+1)
	buffer := func() []byte {
		select {
		case b := <-spare:
			return b[:0]
		default:
			return make([]byte, 0, batchBytes+batchBytes/4)
		}
	}
	var (
		mu     sync.Mutex
		failed bool
		// lineFailed: a batch of elements cut at line ends failed.
		lineFailed bool
		wg         sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range todo {
				err := parse(p.worker(b.data), b)
				select {
				case spare <- b.data:
				default:
				}
				if err != nil {
					mu.Lock()
					failed = true
					lineFailed = lineFailed || b.lines
					mu.Unlock()
				}
			}
		}()
	}
	n := 0
	send := func(b *batch) {
		est := 0
		if p.size > 0 {
			// The elements left, at this batch's bytes per element, but
			// no more than one per 16 bytes: a costed op or edge is
			// longer.
			left := max(p.size-(s.base+int64(s.pos)), 0)
			est = b.n + int(min(left*int64(b.n)/int64(max(len(b.data), 1)), left/16))
		}
		alloc(b, est)
		n += b.n
		todo <- b
	}
	lines := p.lines
	readErr := func() error {
		defer close(todo)
		cur := &batch{data: buffer()}
		for i := 0; ; i++ {
			more, err := s.next(i == 0, ']')
			if err != nil {
				return err
			}
			if !more {
				break
			}
			if c, ok := s.peek(); !ok || c != '{' {
				return errSplit
			}
			var raw []byte
			ok := false
			if lines {
				if raw, ok = s.lineObject(); ok {
					cur.lines = true
				} else {
					lines = false // not one element a line: stop trying
				}
			}
			if !ok {
				if raw, ok = s.rawObject(); !ok {
					return errSplit
				}
			}
			cur.data = append(cur.data, raw...)
			cur.n++
			if len(cur.data) >= batchBytes || cur.n >= batchItems {
				send(cur)
				cur = &batch{seq: cur.seq + 1, first: i + 1, data: buffer()}
				mu.Lock()
				stop := failed
				mu.Unlock()
				if stop {
					return errSplit
				}
			}
		}
		if cur.n > 0 {
			send(cur)
		}
		return nil
	}()
	wg.Wait()
	if lineFailed {
		return 0, errLines
	}
	if readErr != nil || failed {
		return 0, errSplit
	}
	return n, nil
}

// sink hands out room for a list's elements batch by batch, in list
// order, from as few arrays as it can: one, sized from the first batch's
// estimate of the whole list, when that estimate holds. Collecting each
// batch on its own and joining them at the end would write (and, with
// the collector off, fault in) every element twice.
type sink[T any] struct {
	segs [][]T // the arrays, each filled to its length
	last []T   // the array being filled, to its capacity
}

// take is room for n elements, est being the list's elements from here
// on as parseList estimates them.
func (k *sink[T]) take(n, est int) []T {
	if len(k.last)+n > cap(k.last) {
		if len(k.last) > 0 {
			k.segs = append(k.segs, k.last)
		}
		k.last = make([]T, 0, max(n, est, 2*cap(k.last)))
	}
	l := len(k.last)
	k.last = k.last[:l+n]
	return k.last[l : l+n : l+n]
}

// flat is the elements handed out, in order; nil for none.
func (k *sink[T]) flat() []T {
	if len(k.segs) == 0 {
		if len(k.last) == 0 {
			return nil
		}
		return k.last
	}
	return concat(append(k.segs, k.last))
}

// worker is a parser over one batch of elements, sharing p's read-only
// state (the file name, the ops read so far and their index) but none of
// what p changes as it reads.
func (p *parser) worker(data []byte) *parser {
	return &parser{
		s:    &scanner{file: p.file, buf: data, end: len(data), eof: true},
		file: p.file, interned: map[string]string{},
		index: p.index, read: p.read, dup: p.dup, lastEnd: [2]int32{-1, -1},
	}
}

// opsParallel is ops on parseWorkers goroutines.
func (p *parser) opsParallel() ([]Op, error) {
	var ops sink[Op]
	_, err := parseList(p, func(b *batch, est int) { b.out = ops.take(b.n, est) }, func(w *parser, b *batch) error {
		ops := b.out.([]Op)
		w.compact = true
		if sp, ok := timesScratch.Get().(*[]DeviceTime); ok {
			w.times = (*sp)[:0]
		}
		for k := range ops {
			if err := w.op(&ops[k], b.first+k); err != nil {
				return err
			}
		}
		compactTimes(ops, w.times)
		return w.atEnd()
	})
	if err != nil {
		return nil, err
	}
	return p.indexOps(ops.flat()), nil
}

// edgesParallel is edges on parseWorkers goroutines; it also fills p.ends.
func (p *parser) edgesParallel() ([]Edge, error) {
	type part struct {
		edges []Edge
		ends  []ends
	}
	var edges sink[Edge]
	var all sink[ends]
	_, err := parseList(p, func(b *batch, est int) { b.out = part{edges.take(b.n, est), all.take(b.n, est)} }, func(w *parser, b *batch) error {
		r := b.out.(part)
		for k := range r.edges {
			if err := w.edge(&r.edges[k], &r.ends[k], b.first+k); err != nil {
				return err
			}
		}
		return w.atEnd()
	})
	if err != nil {
		return nil, err
	}
	p.ends = chunks[ends]{cur: all.flat()}
	p.ends.n = len(p.ends.cur)
	return edges.flat(), nil
}

// timesScratch holds the slices the ops' times of a batch are read into
// before compactTimes copies them out.
var timesScratch sync.Pool

// compactTimes moves the times of ops, read into all (and slices it
// outgrew), to one array of their exact size (a batch's ops would
// otherwise keep blocks sized for more), and gives all back to
// timesScratch.
func compactTimes(ops []Op, all []DeviceTime) {
	n := 0
	for k := range ops {
		n += len(ops[k].TimesMS)
	}
	block := make([]DeviceTime, n)
	n = 0
	for k := range ops {
		if t := ops[k].TimesMS; len(t) > 0 {
			copy(block[n:], t)
			ops[k].TimesMS = block[n : n+len(t) : n+len(t)]
			n += len(t)
		}
	}
	clear(all) // no strings held from the pool
	all = all[:0]
	timesScratch.Put(&all)
}

// atEnd is errSplit unless the worker's batch is all read.
func (p *parser) atEnd() error {
	if _, ok := p.s.peek(); ok {
		return errSplit
	}
	return nil
}

// concat is the lists one after another; nil for none.
func concat[T any](lists [][]T) []T {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	if n == 0 {
		return nil
	}
	out := make([]T, 0, n)
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// rawObject returns the bytes of the object whose '{' is at pos, found by
// its braces and brackets outside strings without checking anything
// else (the parser that reads them does), and moves past it. ok is false
// when the file ends first. The bytes are valid until the scanner reads
// on.
func (s *scanner) rawObject() (raw []byte, ok bool) {
	depth, inString, i := 0, false, s.pos
	for {
		if i >= s.end {
			n := i - s.pos
			if !s.more() {
				return nil, false
			}
			i = s.pos + n
			continue
		}
		if inString {
			for i < s.end && !stringStop[s.buf[i]] {
				i++
			}
			if i >= s.end {
				continue
			}
			if s.buf[i] == '\\' {
				if i+1 >= s.end {
					n := i - s.pos
					if !s.more() {
						return nil, false
					}
					i = s.pos + n
					continue
				}
				i += 2
				continue
			}
			inString = false // the closing quote
			i++
			continue
		}
		for i < s.end && !structural[s.buf[i]] {
			i++
		}
		if i >= s.end {
			continue
		}
		switch s.buf[i] {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				raw = s.buf[s.pos : i+1]
				s.pos = i + 1
				return raw, true
			}
		}
		i++
	}
}

// lineObject returns the object whose '{' is at pos when it looks like a
// line of its own: the line ends with '}' (and perhaps a comma, left
// unread) and the next line starts another element or ends the list. It
// moves past the object. Finding the line's end is much faster than
// following the braces (rawObject), and where the guess is wrong (a line
// holding two elements, or one that goes on) the worker parsing it finds
// out: it expects exactly one object, and parseV1 reads the document
// again cutting by braces. ok is false, nothing read, where the object
// does not look so, or its line is long.
func (s *scanner) lineObject() (raw []byte, ok bool) {
	const longest = 1 << 16
	for {
		rest := s.buf[s.pos:min(s.end, s.pos+longest)]
		i := bytes.IndexByte(rest, '\n')
		// The line's end and the next line's start are wanted.
		if (i < 0 || len(rest)-i < 64) && len(rest) < longest && s.more() {
			continue
		}
		if i < 0 {
			return nil, false
		}
		end := i
		for end > 0 && (rest[end-1] == ' ' || rest[end-1] == '\t' || rest[end-1] == '\r') {
			end--
		}
		if end > 0 && rest[end-1] == ',' {
			end--
		}
		line := rest[:end]
		if len(line) < 2 || line[end-1] != '}' {
			return nil, false // not an element
		}
		// A '{' after a comma or a bracket on the line may start another
		// element.
		for j := 1; ; j++ {
			k := bytes.IndexByte(line[j:], '{')
			if k < 0 {
				break
			}
			j += k
			b := j - 1
			for b > 0 && (line[b] == ' ' || line[b] == '\t') {
				b--
			}
			if line[b] == ',' || line[b] == '[' {
				return nil, false
			}
		}
		k := i + 1
		for k < len(rest) && (rest[k] == ' ' || rest[k] == '\t' || rest[k] == '\r' || rest[k] == '\n') {
			k++
		}
		if k == len(rest) || rest[k] != '{' && rest[k] != ']' {
			return nil, false
		}
		s.pos += len(line)
		return line, true
	}
}

// stringStop marks the bytes that end a run of a string's plain bytes;
// structural those that matter outside strings.
var stringStop, structural = func() (stop, st [256]bool) {
	stop['"'], stop['\\'] = true, true
	for _, c := range []byte(`"{}[]`) {
		st[c] = true
	}
	return
}()
