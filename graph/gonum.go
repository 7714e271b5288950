package graph

import (
	gg "gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/iterator"
	"gonum.org/v1/gonum/graph/simple"
)

// Directed is a read-only gonum graph.Directed view of an operator graph,
// so gonum's algorithms (topo, path, flow, community) run on it without a
// copy. Node IDs are OpIDs.
type Directed struct {
	g   *Graph
	adj *Adjacency
}

var _ gg.Directed = Directed{}

// AsDirected returns the gonum view of g over its adjacency adj.
func AsDirected(g *Graph, adj *Adjacency) Directed { return Directed{g, adj} }

func (d Directed) valid(id int64) bool { return id >= 0 && id < int64(len(d.g.Ops)) }

// Node returns the node with the given ID, or nil.
func (d Directed) Node(id int64) gg.Node {
	if !d.valid(id) {
		return nil
	}
	return simple.Node(id)
}

// Nodes returns every op in ID order.
func (d Directed) Nodes() gg.Nodes {
	ns := make([]gg.Node, len(d.g.Ops))
	for i := range ns {
		ns[i] = simple.Node(i)
	}
	return iterator.NewOrderedNodes(ns)
}

func (d Directed) nodes(ids []OpID) gg.Nodes {
	if len(ids) == 0 {
		return gg.Empty
	}
	ns := make([]gg.Node, len(ids))
	for i, id := range ids {
		ns[i] = simple.Node(id)
	}
	return iterator.NewOrderedNodes(ns)
}

// From returns the successors of id.
func (d Directed) From(id int64) gg.Nodes {
	if !d.valid(id) {
		return gg.Empty
	}
	return d.nodes(d.adj.Succs(OpID(id)))
}

// To returns the predecessors of id.
func (d Directed) To(id int64) gg.Nodes {
	if !d.valid(id) {
		return gg.Empty
	}
	return d.nodes(d.adj.Preds(OpID(id)))
}

// HasEdgeFromTo reports whether u feeds v.
func (d Directed) HasEdgeFromTo(uid, vid int64) bool {
	if !d.valid(uid) || !d.valid(vid) {
		return false
	}
	_, found := slicesSearch(d.adj.Succs(OpID(uid)), OpID(vid))
	return found
}

// HasEdgeBetween reports whether x and y are joined in either direction.
func (d Directed) HasEdgeBetween(xid, yid int64) bool {
	return d.HasEdgeFromTo(xid, yid) || d.HasEdgeFromTo(yid, xid)
}

// Edge returns the edge from u to v, or nil.
func (d Directed) Edge(uid, vid int64) gg.Edge {
	if !d.HasEdgeFromTo(uid, vid) {
		return nil
	}
	return simple.Edge{F: simple.Node(uid), T: simple.Node(vid)}
}
