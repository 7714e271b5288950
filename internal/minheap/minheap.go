// Package minheap is a binary min-heap over a slice, generic in its
// element and ordering. It replaces container/heap in hot loops (list
// scheduling, topological sorting, event simulation), whose Push(any)
// boxes every element.
package minheap

// Heap holds elements with the least (by Less) on top. The zero value is
// not usable: make one with New.
type Heap[T any] struct {
	a    []T
	less func(a, b T) bool
}

// New returns an empty heap ordered by less.
func New[T any](less func(a, b T) bool) *Heap[T] { return &Heap[T]{less: less} }

// Len is the number of elements.
func (h *Heap[T]) Len() int { return len(h.a) }

// Peek returns the least element without removing it; the heap must not
// be empty.
func (h *Heap[T]) Peek() T { return h.a[0] }

// Push adds v.
func (h *Heap[T]) Push(v T) {
	h.a = append(h.a, v)
	i := len(h.a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.a[i], h.a[p]) {
			break
		}
		h.a[p], h.a[i] = h.a[i], h.a[p]
		i = p
	}
}

// Pop removes and returns the least element; the heap must not be empty.
func (h *Heap[T]) Pop() T {
	top := h.a[0]
	last := len(h.a) - 1
	h.a[0] = h.a[last]
	var zero T
	h.a[last] = zero // let the garbage collector have what it pointed to
	h.a = h.a[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.less(h.a[l], h.a[m]) {
			m = l
		}
		if r < last && h.less(h.a[r], h.a[m]) {
			m = r
		}
		if m == i {
			return top
		}
		h.a[m], h.a[i] = h.a[i], h.a[m]
		i = m
	}
}
