package placer

// Noter is implemented by placers that report how a run went: a solver's
// time, bound and status, a fallback taken. Callers show the notes beside
// the plan; they vary with timing, so they never feed the placement.
type Noter interface {
	Notes() []string
}
