package registry

import (
	"slices"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := New[int]("number")
	r.Register("two", "the second", func() int { return 2 })
	r.Register("one", "the first", func() int { return 1 })
	if got := r.Names(); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("names %v", got)
	}
	if v, err := r.New("two"); err != nil || v != 2 || r.Summary("two") != "the second" {
		t.Errorf("New(two) = %d, %v", v, err)
	}
	if _, err := r.New("three"); err == nil || !strings.Contains(err.Error(), `unknown number "three" (known: [one two])`) {
		t.Errorf("unknown name: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a duplicate registration did not panic")
		}
	}()
	r.Register("one", "again", func() int { return 1 })
}
