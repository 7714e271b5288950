package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHeapSorts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	less := func(a, b int) bool { return a < b }
	for n := 0; n < 200; n += 13 {
		in := make([]int, n)
		for i := range in {
			in[i] = r.IntN(50) // duplicates on purpose
		}
		want := slices.Clone(in)
		slices.Sort(want)

		h := New(less)
		for _, v := range in {
			h.Push(v)
		}
		var out []int
		for h.Len() > 0 {
			p := h.Peek()
			if v := h.Pop(); v != p {
				t.Fatalf("Peek %d, Pop %d", p, v)
			}
			out = append(out, p)
		}
		if !slices.Equal(out, want) {
			t.Fatalf("n=%d: popped %v, want %v", n, out, want)
		}

		// Interleaved pushes and pops lose and invent nothing, and each pop
		// is the least of what is held.
		h = New(less)
		var got, held []int
		for i, v := range in {
			h.Push(v)
			held = append(held, v)
			if i%3 == 2 {
				v := h.Pop()
				if v != slices.Min(held) {
					t.Fatalf("popped %d, least held %d", v, slices.Min(held))
				}
				held = slices.Delete(held, slices.Index(held, v), slices.Index(held, v)+1)
				got = append(got, v)
			}
		}
		for h.Len() > 0 {
			got = append(got, h.Pop())
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: interleaved heap lost or invented elements", n)
		}
	}
}

func TestHeapOrder(t *testing.T) {
	h := New(func(a, b int) bool { return a > b }) // a max-heap by its ordering
	for _, v := range []int{3, 9, 1, 7, 9, 4} {
		h.Push(v)
	}
	var got []int
	for h.Len() > 0 {
		got = append(got, h.Pop())
	}
	if !slices.Equal(got, []int{9, 9, 7, 4, 3, 1}) {
		t.Errorf("popped %v", got)
	}
}
