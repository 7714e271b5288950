// Package constraint holds the rules a user plans under: where ops must or
// must not run, which ops share or never share a device, memory kept free,
// where pipeline stages may cut, how many devices a plan may use, and soft
// preferences. It reads them from a constraints file (YAML) or from the
// one-line spelling the command-line flags use, resolves them on a graph
// and a cluster (which ops and devices each rule binds), rejects rule sets
// no plan can meet, and checks a plan against them.
package constraint

// Kind names a rule.
type Kind string

// The rules. Every rule but Prefer is hard: no plan breaks it.
const (
	// Pin: the selected ops run on the target (a device, one of a type's
	// devices, one of a host's devices).
	Pin Kind = "pin"
	// Avoid: the selected ops never run on the target.
	Avoid Kind = "avoid"
	// Colocate: the selected ops share one device.
	Colocate Kind = "colocate"
	// Separate: ops of different groups never share a device.
	Separate Kind = "separate"
	// Reserve: keep an amount of the target's memory free (on each of its
	// devices).
	Reserve Kind = "reserve"
	// Cut: pipeline stages start only at modules matching a pattern, or
	// never inside a module.
	Cut Kind = "cut"
	// Limit: use at most a number of devices, or only some devices.
	Limit Kind = "limit"
	// Prefer: a soft rule; every selected op placed against it adds its
	// weight to the objective a plan is chosen by.
	Prefer Kind = "prefer"
)

// Kinds lists every rule kind, in the order a constraints file documents
// them.
var Kinds = []Kind{Pin, Avoid, Colocate, Separate, Reserve, Cut, Limit, Prefer}

// Selector picks ops.
type Selector struct {
	// By is one of SelectName (a path.Match pattern over the op's name,
	// the default when a selector has no prefix), SelectRegex (a Go
	// regular expression over the name, unanchored), SelectType (the op
	// type, exact), SelectModule (a module path prefix: "/blocks/blocks.6"
	// and "/blocks/blocks.6/" both select the ops under it, never those of
	// /blocks/blocks.60/) or SelectPhase (forward, backward or update).
	By string
	// Pattern is what follows the prefix.
	Pattern string
}

// Selector prefixes.
const (
	SelectName   = "name"
	SelectRegex  = "re"
	SelectType   = "type"
	SelectModule = "module"
	SelectPhase  = "phase"
)

// Target picks devices.
type Target struct {
	// By is TargetDevice (a device name, the default when a target has no
	// prefix), TargetType (every device of a device type) or TargetHost
	// (every device of a host); TargetAll (spelled "*") is every device.
	By   string
	Name string
}

// Target prefixes.
const (
	TargetDevice = "device"
	TargetType   = "type"
	TargetHost   = "host"
	TargetAll    = "*"
)

// Rule is one rule. Which fields are set depends on Kind.
type Rule struct {
	Kind Kind
	// Source says where the rule was written, for messages: "FILE:LINE"
	// for a constraints file, "--pin" (the flag) for a flag.
	Source string
	// Ops (pin, avoid, colocate, prefer) selects the ops: those matching
	// any of the selectors.
	Ops []Selector
	// Groups (separate) are two or more op groups, each the ops matching
	// any of its selectors.
	Groups [][]Selector
	// Target (pin, avoid, reserve, prefer) is where the rule points.
	Target Target
	// Bytes or Fraction (reserve) is how much of each target device's
	// memory stays free: a byte count, or a fraction in (0, 1).
	Bytes    int64
	Fraction float64
	// CutAt (cut) is a path.Match pattern over module paths written
	// without the trailing slash ("/blocks/blocks.*"): stages may only
	// start at the first op of a module it matches. NotInside (cut) is a
	// module path prefix no stage boundary may fall inside. One of the two
	// is set.
	CutAt     string
	NotInside string
	// MaxDevices or Only (limit): use at most that many devices, or only
	// the devices the targets name.
	MaxDevices int
	Only       []Target
	// Weight (prefer) is the milliseconds added to a plan's objective for
	// every selected op placed against the preference; Not (prefer) makes
	// it "rather not on Target" instead of "rather on Target".
	Weight float64
	Not    bool
}

// Set is a list of rules, in the order they were written: the file's, then
// the flags'.
type Set struct {
	Rules []Rule
}
