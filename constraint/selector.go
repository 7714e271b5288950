package constraint

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// selectorPrefixes are the prefixes a selector may start with, in the
// order messages list them.
var selectorPrefixes = []string{SelectName, SelectRegex, SelectType, SelectModule, SelectPhase}

// Phases are the values a phase: selector takes.
var Phases = []string{"forward", "backward", "update"}

// selectorSpelling is how a selector is written, for messages.
const selectorSpelling = "name:GLOB, re:REGEX, type:OPTYPE, module:PREFIX or phase:forward|backward|update"

// ParseSelector reads one selector: name:GLOB (a path.Match pattern over
// op names), re:REGEX (a Go regular expression, unanchored), type:OPTYPE,
// module:PREFIX (stored with a trailing '/') or phase:forward|backward|
// update. Text without a ':' is a name glob; text whose part before the
// first ':' is not one of those prefixes is an error, so an op name that
// holds a ':' is written with the explicit prefix, name:a:b. Surrounding
// white space is dropped. The error says what is wrong and how selectors
// are spelled; it names no file or flag (callers add that).
func ParseSelector(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Selector{}, fmt.Errorf("empty selector; write %s", selectorSpelling)
	}
	sel := Selector{By: SelectName, Pattern: s}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		p := s[:i]
		if !slices.Contains(selectorPrefixes, p) {
			return Selector{}, fmt.Errorf("unknown selector prefix %q%s; a selector is %s, and an op name holding ':' needs the name: prefix (name:%s)",
				p, suggest(p, selectorPrefixes), selectorSpelling, s)
		}
		sel = Selector{By: p, Pattern: strings.TrimSpace(s[i+1:])}
	}
	if sel.Pattern == "" {
		return Selector{}, fmt.Errorf("selector %q has nothing after %s:; write %s", s, sel.By, selectorSpelling)
	}
	switch sel.By {
	case SelectName:
		if _, err := path.Match(sel.Pattern, ""); err != nil {
			return Selector{}, fmt.Errorf("bad name glob %q: unbalanced [ ] or a trailing \\; globs use path.Match syntax (* ? [a-z] \\x)", sel.Pattern)
		}
	case SelectRegex:
		if _, err := regexp.Compile(sel.Pattern); err != nil {
			msg := strings.TrimPrefix(err.Error(), "error parsing regexp: ")
			return Selector{}, fmt.Errorf("bad regular expression %q: %s; regexes use Go syntax (https://pkg.go.dev/regexp/syntax)", sel.Pattern, msg)
		}
	case SelectModule:
		if !strings.HasSuffix(sel.Pattern, "/") {
			sel.Pattern += "/"
		}
	case SelectPhase:
		lp := strings.ToLower(sel.Pattern)
		if !slices.Contains(Phases, lp) {
			return Selector{}, fmt.Errorf("unknown phase %q%s; a phase is forward, backward or update", sel.Pattern, suggest(sel.Pattern, Phases))
		}
		sel.Pattern = lp
	}
	return sel, nil
}

// String spells s as ParseSelector reads it: always with its prefix,
// "module:/wte/", "name:Loss*".
func (s Selector) String() string { return s.By + ":" + s.Pattern }

// targetPrefixes are the prefixes a target may start with.
var targetPrefixes = []string{TargetType, TargetHost, TargetDevice}

// targetSpelling is how a target is written, for messages.
const targetSpelling = `a device name, type:DEVICETYPE, host:HOST or "*" (every device)`

// targetForbidden are the characters no target name may hold: the flag
// spellings use them as separators.
const targetForbidden = `,=@"`

// ParseTarget reads one target: a device name, type:DEVICETYPE,
// host:HOST, device:NAME (for a device whose name holds a ':' or starts
// with '!') or "*", every device. Names are not checked against a
// cluster here; they may not hold white space or any of , = @ ".
func ParseTarget(s string) (Target, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Target{}, fmt.Errorf("empty target; write %s", targetSpelling)
	}
	if s == "*" {
		return Target{By: TargetAll}, nil
	}
	t := Target{By: TargetDevice, Name: s}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		p := s[:i]
		if !slices.Contains(targetPrefixes, p) {
			return Target{}, fmt.Errorf("unknown target prefix %q%s; a target is %s, and a device whose name holds ':' is written device:NAME",
				p, suggest(p, targetPrefixes), targetSpelling)
		}
		t = Target{By: p, Name: strings.TrimSpace(s[i+1:])}
		if t.Name == "" {
			return Target{}, fmt.Errorf("target %q has nothing after %s:; write %s", s, p, targetSpelling)
		}
	} else if strings.HasPrefix(s, "!") {
		return Target{}, fmt.Errorf("target %q starts with '!', which only --prefer reads (as \"rather not\"); a device whose name starts with '!' is written device:%s", s, s)
	}
	if i := strings.IndexFunc(t.Name, func(r rune) bool {
		return strings.ContainsRune(targetForbidden, r) || r <= ' ' || r == 0x7f
	}); i >= 0 {
		return Target{}, fmt.Errorf("target name %q holds %q; names may not hold white space or any of , = @ \"", t.Name, t.Name[i:i+1])
	}
	return t, nil
}

// String spells t as ParseTarget reads it: "*", "type:T4", "host:h1", or
// a device's bare name ("gpu0"), with device: only where the bare name
// would read as something else.
func (t Target) String() string {
	switch t.By {
	case TargetAll:
		return "*"
	case TargetDevice:
		if t.Name == "" || t.Name == "*" || strings.ContainsRune(t.Name, ':') || strings.HasPrefix(t.Name, "!") || isCount(t.Name) {
			return TargetDevice + ":" + t.Name
		}
		return t.Name
	}
	return t.By + ":" + t.Name
}

// isCount reports whether s is all decimal digits, which --limit reads as
// a device count rather than a device name.
func isCount(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// Selector lists in flag spellings. Selectors are separated by ',' or
// '|'. Inside a re: selector a separator belongs to the regex unless the
// text after it starts another selector (a known prefix and ':', or a
// '"'); so "re:a{1,3}" and "re:a|b" are one regex each. A selector may be
// written as a Go double-quoted string, "\"name:a,b\"", to hold any text.

// listSeps are the separators between selectors.
const listSeps = ",|"

// startsSelector reports whether s (after spaces) begins a selector that
// ends a regex: a known prefix and ':', or a quote.
func startsSelector(s string) bool {
	s = strings.TrimLeft(s, " \t")
	if strings.HasPrefix(s, `"`) {
		return true
	}
	for _, p := range selectorPrefixes {
		if strings.HasPrefix(s, p+":") {
			return true
		}
	}
	return false
}

// splitSelectors splits a flag's selector list into the selectors' texts
// and, for each, the separator after it (0 after the last).
func splitSelectors(s string) (items []string, seps []byte, err error) {
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
	for {
		skip()
		var item string
		if i < len(s) && s[i] == '"' {
			q, err := strconv.QuotedPrefix(s[i:])
			if err != nil {
				return nil, nil, fmt.Errorf("quoted selector %s is not a complete Go string; close the quote and escape \\ and \" inside it", s[i:])
			}
			item, _ = strconv.Unquote(q)
			i += len(q)
			skip()
			if i < len(s) && strings.IndexByte(listSeps, s[i]) < 0 {
				return nil, nil, fmt.Errorf("text %q after the quoted selector %s; separate selectors with ',' or '|'", s[i:], q)
			}
			if strings.TrimSpace(item) == "" {
				return nil, nil, fmt.Errorf("empty selector %s; write %s", q, selectorSpelling)
			}
		} else {
			start := i
			isRe := strings.HasPrefix(s[i:], SelectRegex+":")
			for i < len(s) {
				if strings.IndexByte(listSeps, s[i]) >= 0 && (!isRe || startsSelector(s[i+1:])) {
					break
				}
				i++
			}
			item = strings.TrimSpace(s[start:i])
			if item == "" {
				if len(items) == 0 && i >= len(s) {
					return nil, nil, errors.New("no selector; write " + selectorSpelling)
				}
				return nil, nil, errors.New("empty selector between separators; remove the extra ',' or '|'")
			}
		}
		items = append(items, item)
		if i >= len(s) {
			return items, append(seps, 0), nil
		}
		seps = append(seps, s[i])
		i++
	}
}

// quoteSelector spells sel for a selector list, quoting it where
// splitSelectors would otherwise cut or misread it.
func quoteSelector(sel Selector) string {
	s := sel.String()
	need := false
	if sel.By == SelectRegex {
		for i := 0; i < len(s); i++ {
			if strings.IndexByte(listSeps, s[i]) >= 0 && startsSelector(s[i+1:]) {
				need = true
				break
			}
		}
	} else {
		need = strings.ContainsAny(s, listSeps)
	}
	if need || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}

// joinSelectors spells a union of selectors, separated by sep.
func joinSelectors(sels []Selector, sep string) string {
	parts := make([]string, len(sels))
	for i, s := range sels {
		parts[i] = quoteSelector(s)
	}
	return strings.Join(parts, sep)
}
