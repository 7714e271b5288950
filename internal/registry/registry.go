// Package registry keeps algorithms by name, so adding one (a placer, a
// partitioner) is adding one file whose init registers it.
package registry

import (
	"fmt"
	"slices"
	"sync"
)

// Registry maps names to factories of T. The zero value is not usable:
// make one with New.
type Registry[T any] struct {
	kind    string
	mu      sync.RWMutex
	entries map[string]entry[T]
}

type entry[T any] struct {
	factory func() T
	summary string
}

// New returns an empty registry; kind names what it holds in errors
// ("placer", "pipeline partitioner"), as a user would name it.
func New[T any](kind string) *Registry[T] {
	return &Registry[T]{kind: kind, entries: map[string]entry[T]{}}
}

// Register adds a factory under name. A duplicate name panics: it is a
// programming error, caught when the program starts.
func (r *Registry[T]) Register(name, summary string, factory func() T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.entries[name]; dup {
		panic(fmt.Sprintf("registry: %s %q registered twice", r.kind, name))
	}
	r.entries[name] = entry[T]{factory, summary}
}

// New makes the T registered under name.
func (r *Registry[T]) New(name string) (T, error) {
	r.mu.RLock()
	e, ok := r.entries[name]
	r.mu.RUnlock()
	if !ok {
		var zero T
		return zero, fmt.Errorf("unknown %s %q (known: %v)", r.kind, name, r.Names())
	}
	return e.factory(), nil
}

// Names lists the registered names, sorted.
func (r *Registry[T]) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Summary is the one-line description name was registered with.
func (r *Registry[T]) Summary(name string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.entries[name].summary
}
