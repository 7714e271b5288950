package constraint

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// flagSpelling is how each rule's flag is spelled, and an example.
var flagSpelling = map[Kind][2]string{
	Pin:      {"SELECTOR=TARGET", "module:/wte/=gpu0"},
	Avoid:    {"SELECTOR=TARGET", "phase:backward=type:T4"},
	Colocate: {"SELECTOR[,SELECTOR...]", "module:/tower_a/,name:Loss*"},
	Separate: {"SELECTOR,SELECTOR[,...]", "module:/tower_a/,module:/tower_b/"},
	Reserve:  {"TARGET=AMOUNT", "type:A100=10%"},
	Cut:      {"PATTERN or not-inside:PREFIX", "/blocks/blocks.*"},
	Limit:    {"N or TARGET[,TARGET...]", "4"},
	Prefer:   {"SELECTOR=[!]TARGET[@WEIGHT]", "phase:update=!type:T4@2"},
}

// ParseFlag reads the value of one rule flag, --KIND VALUE:
//
//	--pin SELECTOR=TARGET         --avoid SELECTOR=TARGET
//	--colocate SELECTOR           --separate SELECTOR,SELECTOR[,...]
//	--reserve TARGET=AMOUNT       --cut PATTERN | --cut not-inside:PREFIX
//	--limit N | --limit TARGET[,TARGET...]
//	--prefer SELECTOR=[!]TARGET[@WEIGHT]
//
// Where one SELECTOR stands, a union of selectors may be written with ','
// or '|' between them; --separate separates its groups with ',' and
// joins the selectors of one group with '|'. SELECTOR=TARGET splits at
// the last '=', so selectors may hold '=' (targets never do). --limit
// takes at most one count among its items. The rule's Source is
// "--KIND". Every error is a *FlagError naming the flag and its value.
func ParseFlag(kind Kind, value string) (Rule, error) {
	flag := "--" + string(kind)
	spelling, ok := flagSpelling[kind]
	if !ok {
		names := make([]string, len(Kinds))
		for i, k := range Kinds {
			names[i] = string(k)
		}
		return Rule{}, &FlagError{Flag: flag, Value: value, Msg: fmt.Sprintf("unknown rule %q%s; the rules are %s", kind, suggest(string(kind), names), strings.Join(names, ", "))}
	}
	fail := func(err error) error {
		return &FlagError{Flag: flag, Value: value, Msg: err.Error()}
	}
	failSpelling := func(format string, args ...any) error {
		return &FlagError{Flag: flag, Value: value, Msg: fmt.Sprintf(format, args...) +
			fmt.Sprintf("; write %s %s, like %s %s", flag, spelling[0], flag, spelling[1])}
	}
	r := Rule{Kind: kind, Source: flag}
	// lhs and rhs are the two sides of the last '='.
	split := func(what string) (lhs, rhs string, err error) {
		i := strings.LastIndexByte(value, '=')
		if i < 0 {
			return "", "", failSpelling("missing =%s", what)
		}
		return value[:i], value[i+1:], nil
	}
	switch kind {
	case Pin, Avoid, Prefer:
		lhs, rhs, err := split("TARGET")
		if err != nil {
			return Rule{}, err
		}
		if strings.TrimSpace(lhs) == "" {
			return Rule{}, failSpelling("no selector before '='")
		}
		groups, err := parseSelectorList(lhs, false)
		if err != nil {
			return Rule{}, fail(err)
		}
		r.Ops = groups[0]
		if kind == Prefer {
			rhs = strings.TrimSpace(rhs)
			if rest, ok := strings.CutPrefix(rhs, "!"); ok {
				r.Not, rhs = true, rest
			}
			r.Weight = 1
			if j := strings.LastIndexByte(rhs, '@'); j >= 0 {
				if r.Weight, err = parseWeight(rhs[j+1:]); err != nil {
					return Rule{}, fail(err)
				}
				rhs = rhs[:j]
			}
		}
		if r.Target, err = ParseTarget(rhs); err != nil {
			return Rule{}, fail(err)
		}
	case Colocate:
		groups, err := parseSelectorList(value, false)
		if err != nil {
			return Rule{}, fail(err)
		}
		r.Ops = groups[0]
	case Separate:
		groups, err := parseSelectorList(value, true)
		if err != nil {
			return Rule{}, fail(err)
		}
		if len(groups) < 2 {
			return Rule{}, failSpelling("names one group; separate needs two or more, with ',' between groups")
		}
		r.Groups = groups
	case Reserve:
		lhs, rhs, err := split("AMOUNT")
		if err != nil {
			return Rule{}, err
		}
		if r.Target, err = ParseTarget(lhs); err != nil {
			return Rule{}, fail(err)
		}
		if r.Bytes, r.Fraction, err = parseAmount(rhs); err != nil {
			return Rule{}, fail(err)
		}
	case Cut:
		v := strings.TrimSpace(value)
		var err error
		if rest, ok := strings.CutPrefix(v, "not-inside:"); ok {
			r.NotInside, err = parseNotInside(rest)
		} else {
			r.CutAt, err = parseCutAt(strings.TrimPrefix(v, "at:"))
		}
		if err != nil {
			return Rule{}, fail(err)
		}
	case Limit:
		for _, item := range strings.Split(value, ",") {
			item = strings.TrimSpace(item)
			if isCount(item) || strings.HasPrefix(item, "-") {
				if r.MaxDevices != 0 {
					return Rule{}, failSpelling("gives two device counts; give one")
				}
				n, err := parseCount(item)
				if err != nil {
					return Rule{}, fail(err)
				}
				r.MaxDevices = n
				continue
			}
			t, err := ParseTarget(item)
			if err != nil {
				return Rule{}, fail(err)
			}
			r.Only = append(r.Only, t)
		}
	}
	return r, nil
}

// parseSelectorList reads a flag's selectors. With groups, ',' ends a
// group and '|' joins the selectors of one; without, both join, giving
// one group.
func parseSelectorList(s string, groups bool) ([][]Selector, error) {
	items, seps, err := splitSelectors(s)
	if err != nil {
		return nil, err
	}
	out := [][]Selector{nil}
	for i, item := range items {
		sel, err := ParseSelector(item)
		if err != nil {
			return nil, err
		}
		out[len(out)-1] = append(out[len(out)-1], sel)
		if groups && seps[i] == ',' {
			out = append(out, nil)
		}
	}
	return out, nil
}

// parseCutAt reads a cut: pattern, a path.Match pattern over module
// paths, stored without its trailing '/'.
func parseCutAt(s string) (string, error) {
	p := strings.TrimRight(strings.TrimSpace(s), "/")
	if p == "" {
		return "", fmt.Errorf("empty cut pattern %q; give a module path pattern like /blocks/blocks.*", s)
	}
	if _, err := path.Match(p, ""); err != nil {
		return "", fmt.Errorf("bad cut pattern %q: unbalanced [ ] or a trailing \\; patterns use path.Match syntax, like /blocks/blocks.*", p)
	}
	return p, nil
}

// parseNotInside reads a not_inside: module path prefix, stored with a
// trailing '/'.
func parseNotInside(s string) (string, error) {
	p := strings.TrimSpace(s)
	if p == "" {
		return "", fmt.Errorf("empty module path; give the module no stage boundary may fall inside, like /encoder/layer.3")
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p, nil
}

// parseCount reads a limit's device count, at least 1.
func parseCount(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil {
		if isCount(s) {
			return 0, fmt.Errorf("device count %s is too large", s)
		}
		return 0, fmt.Errorf("cannot read %q as a device count; give a whole number, at least 1", s)
	}
	if n < 1 {
		return 0, fmt.Errorf("device count %d leaves no device to place on; give at least 1", n)
	}
	return n, nil
}

// String spells r in one line as its flag does, after the rule's kind:
// "pin module:/wte/=gpu0", "reserve type:A100=10%", "prefer
// phase:update=!type:T4@2", "limit 4", "cut not-inside:/encoder/layer.3/".
// ParseFlag(r.Kind, the text after the kind and a space) reads back r, but
// for its Source.
func (r Rule) String() string { return string(r.Kind) + " " + r.flagValue() }

// flagValue spells r as the value of its flag.
func (r Rule) flagValue() string {
	switch r.Kind {
	case Pin, Avoid:
		return joinSelectors(r.Ops, ",") + "=" + r.Target.String()
	case Colocate:
		return joinSelectors(r.Ops, ",")
	case Separate:
		groups := make([]string, len(r.Groups))
		for i, g := range r.Groups {
			groups[i] = joinSelectors(g, "|")
		}
		return strings.Join(groups, ",")
	case Reserve:
		return r.Target.String() + "=" + formatAmount(r.Bytes, r.Fraction)
	case Cut:
		if r.NotInside != "" {
			return "not-inside:" + r.NotInside
		}
		if strings.HasPrefix(r.CutAt, "not-inside:") || strings.HasPrefix(r.CutAt, "at:") {
			return "at:" + r.CutAt
		}
		return r.CutAt
	case Limit:
		var parts []string
		if r.MaxDevices > 0 {
			parts = append(parts, strconv.Itoa(r.MaxDevices))
		}
		for _, t := range r.Only {
			parts = append(parts, t.String())
		}
		return strings.Join(parts, ",")
	case Prefer:
		s := joinSelectors(r.Ops, ",") + "="
		if r.Not {
			s += "!"
		}
		s += r.Target.String()
		if r.Weight != 1 {
			s += "@" + formatWeight(r.Weight)
		}
		return s
	}
	return ""
}
