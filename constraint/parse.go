package constraint

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/internal/files"
)

// topKeys are the sections of a constraints file, in constraint.Kinds
// order.
var topKeys = func() []string {
	keys := make([]string, len(Kinds))
	for i, k := range Kinds {
		keys[i] = string(k)
	}
	return keys
}()

// ruleKeys are the keys of one rule of each section; separate's rules are
// lists, not mappings, and limit is one mapping rather than a list.
var ruleKeys = map[Kind][]string{
	Pin:      {"ops", "to"},
	Avoid:    {"ops", "on"},
	Colocate: {"ops"},
	Reserve:  {"on", "amount"},
	Cut:      {"at", "not_inside"},
	Limit:    {"devices", "only"},
	Prefer:   {"ops", "on", "not_on", "weight"},
}

// Load reads and parses the constraints file at path. A problem with the
// file's contents is a *FileError; failing to read it is the error from
// files.ReadFile (os.ReadFile's, bounded for pipes and devices).
func Load(path string) (*Set, error) {
	data, err := files.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse reads a constraints file's contents; file names it in errors and
// in each rule's Source ("FILE:LINE", the line of the rule's entry). The
// format is described in docs/constraints.md. Rules come out in section
// order (constraint.Kinds), within a section in file order; a limit:
// section is one rule, holding its device count and its targets both
// when it gives both. Every error is a *FileError naming the line and
// field at fault. Parse never panics.
func Parse(file string, data []byte) (*Set, error) {
	p := newParser(file)
	root, err := p.Decode(data)
	if err != nil {
		return nil, err
	}
	top, err := p.mapping(root, "", topKeys...)
	if err != nil {
		return nil, err
	}
	set := &Set{}
	for _, kind := range Kinds {
		n := top.Get(string(kind))
		if n == nil {
			continue
		}
		field := string(kind)
		if kind == Limit {
			r, err := p.limit(n, field)
			if err != nil {
				return nil, err
			}
			set.Rules = append(set.Rules, r)
			continue
		}
		items, err := p.list(n, field, string(kind)+" rules")
		if err != nil {
			return nil, err
		}
		for i, item := range items {
			r, err := p.rule(kind, item, fmt.Sprintf("%s[%d]", kind, i))
			if err != nil {
				return nil, err
			}
			set.Rules = append(set.Rules, r)
		}
	}
	if len(set.Rules) == 0 {
		return nil, p.ErrAt(root, "", "file holds no rules; %s", emptyHint)
	}
	return set, nil
}

// rule reads one entry of a section other than limit.
func (p *parser) rule(kind Kind, n *yaml.Node, field string) (Rule, error) {
	r := Rule{Kind: kind, Source: fmt.Sprintf("%s:%d", p.File, n.Line)}
	if kind == Separate {
		groups, err := p.list(n, field, "two or more op groups (each a selector or a list of selectors)")
		if err != nil {
			return Rule{}, err
		}
		if len(groups) < 2 {
			return Rule{}, p.ErrAt(n, field, "lists one group; separate needs two or more, like [module:/tower_a/, module:/tower_b/]")
		}
		for j, g := range groups {
			sels, err := p.selectors(g, fmt.Sprintf("%s[%d]", field, j))
			if err != nil {
				return Rule{}, err
			}
			r.Groups = append(r.Groups, sels)
		}
		return r, nil
	}
	m, err := p.mapping(n, field, ruleKeys[kind]...)
	if err != nil {
		return Rule{}, err
	}
	switch kind {
	case Pin, Avoid, Colocate, Prefer:
		if r.Ops, err = p.ops(m); err != nil {
			return Rule{}, err
		}
	}
	switch kind {
	case Pin:
		r.Target, err = p.requiredTarget(m, "to")
	case Avoid:
		r.Target, err = p.requiredTarget(m, "on")
	case Reserve:
		if r.Target, err = p.requiredTarget(m, "on"); err != nil {
			return Rule{}, err
		}
		s, an, err := p.required(m, "amount", amountSpelling)
		if err != nil {
			return Rule{}, err
		}
		if r.Bytes, r.Fraction, err = parseAmount(s); err != nil {
			return Rule{}, p.ErrAt(an, m.Field("amount"), "%v", err)
		}
	case Cut:
		at, notInside := m.Get("at"), m.Get("not_inside")
		switch {
		case at != nil && notInside != nil:
			return Rule{}, p.ErrAt(m.Node, field, "gives both at and not_inside; write each as its own cut entry")
		case at != nil:
			s, err := p.scalarNode(at, m.Field("at"), "a module path pattern, like /blocks/blocks.*")
			if err != nil {
				return Rule{}, err
			}
			if r.CutAt, err = parseCutAt(s); err != nil {
				return Rule{}, p.ErrAt(at, m.Field("at"), "%v", err)
			}
		case notInside != nil:
			s, err := p.scalarNode(notInside, m.Field("not_inside"), "a module path, like /encoder/layer.3")
			if err != nil {
				return Rule{}, err
			}
			if r.NotInside, err = parseNotInside(s); err != nil {
				return Rule{}, p.ErrAt(notInside, m.Field("not_inside"), "%v", err)
			}
		default:
			return Rule{}, p.ErrAt(m.Node, field, "needs at: PATTERN (stages start only at modules it matches) or not_inside: MODULE (no stage boundary inside it)")
		}
	case Prefer:
		on, okOn, err := p.target(m, "on")
		if err != nil {
			return Rule{}, err
		}
		notOn, okNot, err := p.target(m, "not_on")
		if err != nil {
			return Rule{}, err
		}
		switch {
		case okOn && okNot:
			return Rule{}, p.ErrAt(m.Node, field, "gives both on and not_on; a preference is either for a target (on) or against one (not_on): write two entries")
		case okOn:
			r.Target = on
		case okNot:
			r.Target, r.Not = notOn, true
		default:
			return Rule{}, p.ErrAt(m.Node, field, "needs on: TARGET (rather there) or not_on: TARGET (rather not there)")
		}
		r.Weight = 1
		if wn := m.Get("weight"); wn != nil {
			s, err := p.scalarNode(wn, m.Field("weight"), "a number of milliseconds, like 2")
			if err != nil {
				return Rule{}, err
			}
			if r.Weight, err = parseWeight(s); err != nil {
				return Rule{}, p.ErrAt(wn, m.Field("weight"), "%v", err)
			}
		}
	}
	if err != nil {
		return Rule{}, err
	}
	return r, nil
}

// limit reads the limit: mapping: one rule with its device count, its
// targets, or both.
func (p *parser) limit(n *yaml.Node, field string) (Rule, error) {
	if n.Kind == yaml.SequenceNode {
		return Rule{}, p.ErrAt(n, field, "is a list; limit is one mapping, like limit: {devices: 4, only: [gpu0, host:h1]}")
	}
	m, err := p.mapping(n, field, ruleKeys[Limit]...)
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Kind: Limit, Source: fmt.Sprintf("%s:%d", p.File, n.Line)}
	dn, on := m.Get("devices"), m.Get("only")
	if dn == nil && on == nil {
		return Rule{}, p.ErrAt(n, field, "needs devices: N (at most N devices) or only: [TARGET, ...] (only these devices), or both")
	}
	if dn != nil {
		s, err := p.scalarNode(dn, m.Field("devices"), "a device count, at least 1")
		if err != nil {
			return Rule{}, err
		}
		if r.MaxDevices, err = parseCount(s); err != nil {
			return Rule{}, p.ErrAt(dn, m.Field("devices"), "%v", err)
		}
	}
	if on != nil {
		texts, nodes, fields, err := p.scalars(on, m.Field("only"), "a target")
		if err != nil {
			return Rule{}, err
		}
		for i, s := range texts {
			t, err := ParseTarget(s)
			if err != nil {
				return Rule{}, p.ErrAt(nodes[i], fields[i], "%v", err)
			}
			r.Only = append(r.Only, t)
		}
	}
	return r, nil
}
