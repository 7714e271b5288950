package onnx

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// ONNX Runtime contrib ops (domain com.microsoft) that optimised
// transformer and CNN exports use. Fused forms count their matrix
// products as MACs like the unfused ops would.

func init() {
	register(msDomain, inferMSAttention, "Attention")
	register(msDomain, inferMultiHeadAttention, "MultiHeadAttention")
	register(msDomain, inferSkipLayerNorm, "SkipLayerNormalization", "SkipSimplifiedLayerNormalization")
	register(msDomain, inferLayerNorm, "LayerNormalization", "SimplifiedLayerNormalization")
	register(msDomain, inferFusedConv, "FusedConv")
	register(msDomain, inferFusedMatMul, "FusedMatMul")
	register(msDomain, inferSameShape(8), "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasFastGelu")
	register(msDomain, inferBiasAdd, "BiasAdd")
	register(msDomain, inferEmbedLayerNorm, "EmbedLayerNormalization")
}

// inferMSAttention shapes com.microsoft Attention: input B×S×hidden,
// packed QKV weights hidden×(q+k+v) (qkv_hidden_sizes, or three equal
// parts), optional past 2×B×heads×P×d. MACs: the QKV projection, QKᵀ
// and the weighted sum of V.
func inferMSAttention(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	w, err := n.need(1)
	if err != nil {
		return err
	}
	if x.rank() != 3 || w.rank() != 2 || w.shape[0] != x.shape[2] {
		return fmt.Errorf("input %v and weights %v must be B×S×hidden and hidden×3·hidden", x.shape, w.shape)
	}
	heads := n.attrs.Int("num_heads", 0)
	sizes := n.attrs.Ints("qkv_hidden_sizes")
	if sizes == nil {
		if w.shape[1]%3 != 0 {
			return fmt.Errorf("weights %v do not split into Q, K and V", w.shape)
		}
		s := w.shape[1] / 3
		sizes = []int64{s, s, s}
	}
	if len(sizes) != 3 || heads <= 0 || sizes[0]%heads != 0 || sizes[2]%heads != 0 || sizes[0]+sizes[1]+sizes[2] != w.shape[1] {
		return fmt.Errorf("num_heads %d and qkv_hidden_sizes %v do not fit weights %v", heads, sizes, w.shape)
	}
	b, s := x.shape[0], x.shape[1]
	past := int64(0)
	if p := n.input(4); p != nil && p.rank() == 5 {
		past = p.shape[3]
	}
	total := s + past
	if err := n.set(0, x.dtype, []int64{b, s, sizes[2]}); err != nil {
		return err
	}
	if err := n.set(1, x.dtype, []int64{2, b, heads, total, sizes[2] / heads}); err != nil {
		return err
	}
	proj := shapes.MulSat(shapes.MulSat(b, s), shapes.MulSat(x.shape[2], w.shape[1]))
	scores := shapes.MulSat(shapes.MulSat(b, heads), shapes.MulSat(s, total))
	macs := shapes.AddSat(proj, shapes.AddSat(shapes.MulSat(scores, sizes[0]/heads), shapes.MulSat(scores, sizes[2]/heads)))
	n.macs(macs, shapes.MulSat(5, scores))
	return nil
}

// inferMultiHeadAttention shapes com.microsoft MultiHeadAttention with
// separate (already projected) query B×S×D, key and value B×L×D or
// B×heads×L×d.
func inferMultiHeadAttention(n *node) error {
	q, err := n.need(0)
	if err != nil {
		return err
	}
	heads := n.attrs.Int("num_heads", 0)
	if q.rank() != 3 || heads <= 0 || q.shape[2]%heads != 0 {
		return fmt.Errorf("query %v does not split into %d heads", q.shape, heads)
	}
	b, s, d := q.shape[0], q.shape[1], q.shape[2]
	kvLen, dv := s, d
	if k := n.input(1); k != nil {
		switch k.rank() {
		case 3:
			kvLen = k.shape[1]
		case 4:
			kvLen = k.shape[2]
		}
	}
	if v := n.input(2); v != nil {
		switch v.rank() {
		case 3:
			dv = v.shape[2]
		case 4:
			dv = v.shape[1] * v.shape[3]
		}
	}
	if err := n.set(0, q.dtype, []int64{b, s, dv}); err != nil {
		return err
	}
	scores := shapes.MulSat(shapes.MulSat(b, heads), shapes.MulSat(s, kvLen))
	n.macs(shapes.AddSat(shapes.MulSat(scores, d/heads), shapes.MulSat(scores, dv/heads)), shapes.MulSat(5, scores))
	return nil
}

func inferSkipLayerNorm(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	skip, err := n.need(1)
	if err != nil {
		return err
	}
	if _, err := broadcast(x.shape, skip.shape); err != nil {
		return err
	}
	if err := n.set(0, x.dtype, shapes.Clone(x.shape)); err != nil {
		return err
	}
	stat := shapes.Clone(x.shape)
	if len(stat) > 0 {
		stat[len(stat)-1] = 1
	}
	for i := 1; i <= 2; i++ {
		if err := n.set(i, graph.Float32, shapes.Clone(stat)); err != nil {
			return err
		}
	}
	if err := n.set(3, x.dtype, shapes.Clone(x.shape)); err != nil {
		return err
	}
	n.flops(shapes.MulSat(10, x.elems()))
	return nil
}

func inferFusedConv(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	w, err := n.need(1)
	if err != nil {
		return err
	}
	if err := n.convCommon(x, w, n.input(2), x.dtype, n.attrs.Int("group", 1)); err != nil {
		return err
	}
	// The fused activation (and optional residual Z) cost one FLOP or so
	// per output element.
	n.work.FLOPs = shapes.AddSat(n.work.FLOPs, n.outElems(0))
	return nil
}

func inferFusedMatMul(n *node) error {
	a, err := n.need(0)
	if err != nil {
		return err
	}
	b, err := n.need(1)
	if err != nil {
		return err
	}
	as, bs := shapes.Clone(a.shape), shapes.Clone(b.shape)
	swap := func(s []int64) {
		if len(s) >= 2 {
			s[len(s)-1], s[len(s)-2] = s[len(s)-2], s[len(s)-1]
		}
	}
	if n.attrs.Int("transA", 0) != 0 {
		swap(as)
	}
	if n.attrs.Int("transB", 0) != 0 {
		swap(bs)
	}
	out, macs, err := matmulShape(as, bs)
	if err != nil {
		return err
	}
	if err := n.set(0, a.dtype, out); err != nil {
		return err
	}
	n.macs(macs, shapes.Prod(out))
	return nil
}

func inferBiasAdd(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	n.flops(shapes.MulSat(2, x.elems()))
	return n.set(0, x.dtype, shapes.Clone(x.shape))
}

func inferEmbedLayerNorm(n *node) error {
	ids, err := n.need(0)
	if err != nil {
		return err
	}
	word, err := n.need(2)
	if err != nil {
		return err
	}
	if ids.rank() != 2 || word.rank() != 2 {
		return fmt.Errorf("input_ids %v and word embedding %v must be 2-D", ids.shape, word.shape)
	}
	out := []int64{ids.shape[0], ids.shape[1], word.shape[1]}
	if err := n.set(0, word.dtype, out); err != nil {
		return err
	}
	if err := n.set(1, graph.Int32, []int64{ids.shape[0]}); err != nil {
		return err
	}
	if err := n.set(2, word.dtype, shapes.Clone(out)); err != nil {
		return err
	}
	n.flops(shapes.MulSat(10, shapes.Prod(out)))
	return nil
}
