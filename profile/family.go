package profile

import (
	"strings"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
)

// The op families calibration fits separately: kernels of one family
// reach similar fractions of peak (a convolution's im2col+GEMM, a
// streaming elementwise loop, a reduction), kernels of different families
// do not.
const (
	FamilyConv        = "conv"
	FamilyMatMul      = "matmul"
	FamilyPool        = "pool"
	FamilyElementwise = "elementwise"
	FamilyReduce      = "reduce"
	FamilyMovement    = "movement"
	FamilyOther       = "other"
	// FamilyUpdate is a training step's optimizer updates (train.Build's
	// Update<Optimizer> ops): an imported trace spreads the optimizer's
	// time over them, so they are fitted apart from measured kernels.
	FamilyUpdate = "update"
	// FamilyView ops launch no kernel; they are never fitted.
	FamilyView = "view"
	// FamilyAll is the fit over every measurement, used for families with
	// too few of their own.
	FamilyAll = "all"
	// The groups: a family with too few ops of its own uses its group's
	// fit. Compute families' fits have the efficiency ramp, memory ones'
	// a cache level.
	FamilyCompute = "compute"
	FamilyMemory  = "memory"
)

// Group names the group of a family (FamilyCompute for conv and matmul,
// FamilyMemory for the others); a group or FamilyAll is its own group.
func Group(family string) string {
	switch family {
	case FamilyConv, FamilyMatMul, FamilyCompute:
		return FamilyCompute
	case FamilyAll:
		return FamilyAll
	}
	return FamilyMemory
}

// Family names the calibration family of an op type; a gradient op
// ("ConvGrad", train.Build's) is in its forward op's family.
func Family(opType string) string {
	if base, ok := strings.CutSuffix(opType, "Grad"); ok && base != "" {
		opType = base
	}
	switch {
	case strings.HasPrefix(opType, "Update"):
		return FamilyUpdate
	case cost.IsMetadataOp(opType):
		return FamilyView
	case strings.HasPrefix(opType, "Conv") || opType == "QLinearConv" || opType == "DepthwiseConv2dNative":
		return FamilyConv
	case opType == "MatMul" || opType == "Gemm" || strings.Contains(opType, "MatMul") || opType == "Einsum":
		return FamilyMatMul
	case strings.Contains(opType, "Pool"):
		return FamilyPool
	case graph.IsElementwiseOp(opType):
		return FamilyElementwise
	case strings.HasPrefix(opType, "Reduce") || strings.Contains(opType, "Softmax") ||
		strings.Contains(opType, "Normalization") || opType == "ArgMax" || opType == "ArgMin" || opType == "TopK":
		return FamilyReduce
	case opType == "Transpose" || opType == "Concat" || opType == "Split" || opType == "Slice" ||
		opType == "Gather" || opType == "GatherElements" || opType == "Pad" || opType == "Expand" ||
		opType == "Tile" || opType == "Resize" || opType == "ScatterND" || opType == "DepthToSpace":
		return FamilyMovement
	}
	return FamilyOther
}
