package costed

import (
	"errors"
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
}

// parseList reads the list (an array of objects, or null) at the scanner
// and hands its elements, batch by batch, to parse on parseWorkers
// goroutines; parse gets a worker's parser over the batch and returns
// the batch's result. The results come back in list order (none for a
// null list). Any error of the reading or of a worker is errSplit.
func parseList[T any](p *parser, parse func(w *parser, b *batch) (T, error)) ([]T, error) {
	s := p.s
	k, err := s.value()
	switch {
	case err != nil:
		return nil, errSplit
	case k == "null":
		if s.literal() != nil {
			return nil, errSplit
		}
		return nil, nil
	case k != "array":
		return nil, errSplit
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
		mu      sync.Mutex
		results []T
		failed  bool
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range todo {
				r, err := parse(p.worker(b.data), b)
				select {
				case spare <- b.data:
				default:
				}
				mu.Lock()
				if err != nil {
					failed = true
				} else {
					for len(results) <= b.seq {
						var zero T
						results = append(results, zero)
					}
					results[b.seq] = r
				}
				mu.Unlock()
			}
		}()
	}
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
			raw, ok := s.rawObject()
			if !ok {
				return errSplit
			}
			cur.data = append(cur.data, raw...)
			cur.n++
			if len(cur.data) >= batchBytes || cur.n >= batchItems {
				todo <- cur
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
			todo <- cur
		}
		return nil
	}()
	wg.Wait()
	if readErr != nil || failed {
		return nil, errSplit
	}
	return results, nil
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
	batches, err := parseList(p, func(w *parser, b *batch) ([]Op, error) {
		ops := make([]Op, b.n)
		for k := range ops {
			if err := w.op(&ops[k], b.first+k); err != nil {
				return nil, err
			}
		}
		return ops, w.atEnd()
	})
	if err != nil {
		return nil, err
	}
	return p.indexOps(concat(batches)), nil
}

// edgesParallel is edges on parseWorkers goroutines; it also fills p.ends.
func (p *parser) edgesParallel() ([]Edge, error) {
	type part struct {
		edges []Edge
		ends  []ends
	}
	batches, err := parseList(p, func(w *parser, b *batch) (part, error) {
		r := part{make([]Edge, b.n), make([]ends, b.n)}
		for k := range r.edges {
			if err := w.edge(&r.edges[k], &r.ends[k], b.first+k); err != nil {
				return part{}, err
			}
		}
		return r, w.atEnd()
	})
	if err != nil {
		return nil, err
	}
	edges := make([][]Edge, len(batches))
	all := make([][]ends, len(batches))
	for i, b := range batches {
		edges[i], all[i] = b.edges, b.ends
	}
	p.ends = chunks[ends]{cur: concat(all)}
	p.ends.n = len(p.ends.cur)
	return concat(edges), nil
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

// stringStop marks the bytes that end a run of a string's plain bytes;
// structural those that matter outside strings.
var stringStop, structural = func() (stop, st [256]bool) {
	stop['"'], stop['\\'] = true, true
	for _, c := range []byte(`"{}[]`) {
		st[c] = true
	}
	return
}()
