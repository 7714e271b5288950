package cluster

import (
	"sort"
	"strings"

	"github.com/opplace/opplace/graph"
)

// Figures below are dense peak throughput (no structured sparsity) from
// NVIDIA's public datasheets for the SXM parts unless named otherwise.
//
// Per element type the figure is what a framework's default matmul path
// reaches, since matmuls and convolutions dominate the FLOPs of a model:
//
//   - float32 is the plain FP32 CUDA-core figure, not TF32: PyTorch has
//     defaulted torch.backends.cuda.matmul.allow_tf32 to False since 1.12,
//     so an FP32 matmul does not use tensor cores unless asked to. The
//     TF32 tensor-core figure is TF32FLOPS, used for float32 matmuls and
//     convolutions only when a plan asks for precision tf32 (peak_flops:
//     tf32: in a cluster file); parts without TF32 (V100, T4) have none.
//   - float16 and bfloat16 are the tensor-core figures; elementwise fp16
//     work runs slower, but it is memory-bound anyway and the cost model
//     charges it by memory bandwidth.
//   - float64 is the FP64 tensor-core figure where cuBLAS uses it by
//     default (A100, H100: DMMA is IEEE-exact, so no opt-in is needed).
//   - int8 and float8 are tensor-core figures where the part has them.
//
// Types a part has no entry for run at its float32 figure (see
// DeviceType.FLOPS); for bfloat16 on V100 and T4, which lack it, that is
// the FP32 emulation speed.
//
// Memory is quoted in GB by NVIDIA but is GiB of HBM/GDDR; the driver
// keeps a few hundred MiB of it, which a device's memory: key can take
// off.

// gpuLaunchOverhead is an assumption, not a datasheet figure: measured
// CUDA kernel launch latency is 3-10 us depending on driver, framework
// and whether CUDA graphs are used; 5 us is a middle value.
const gpuLaunchOverhead = 5e-6

// Achievable speed (DeviceType.Efficiency, docs/model.md#achievable-speed).
// Each figure's source is beside it; "fit" marks the three fitted on the
// fitting set of testdata/measured/published.yaml (V100 cases only), and
// "assumed" one without a source.
const (
	// cudaCoreEff is e_max of float32 matmuls and convolutions on CUDA
	// cores, and of every other op's FLOPs. Fit on V100 (0.9); the other
	// parts take the same figure, an assumption checked by the held-out
	// cases.
	cudaCoreEff = 0.9
	// tensorCoreEff is e_max of matmuls (GEMMs) on tensor cores (half
	// types, TF32): assumed, the old flat default, for want of a published
	// large-GEMM figure per part.
	tensorCoreEff = 0.7
	// tensorConvEff is e_max of convolutions on tensor cores. Fit on V100
	// (0.4: eager-PyTorch ResNet-50 convolutions reach far less of the
	// tensor-core peak than of the CUDA-core one); the other parts take
	// the same figure, an assumption checked by the held-out cases.
	// Since the training step holds only what autograd saves
	// (train/saved.go), the same grid search prefers 0.35, but only by
	// absorbing the batch-norm work the BN-folded ResNet-50 lacks in its
	// training cases (docs/model.md); 0.4 is kept.
	tensorConvEff = 0.4
	// matmulHalfPerSM is W_half per streaming multiprocessor, in FLOPs.
	// The ramp comes from tile and wave quantization: a GEMM whose output
	// tiles do not fill every SM for a few waves leaves SMs idle (NVIDIA,
	// Matrix Multiplication Background User's Guide, "Dimension
	// Quantization Effects",
	// https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html),
	// so W_half scales with the SM count. Fit on V100 (0.75 GFLOP over
	// 80 SMs, about one wave of 128x128 tiles with K = 290).
	matmulHalfPerSM = 0.75e9 / 80
	// defaultMemEff is the achieved fraction of bandwidth where no
	// measurement was found (V100, T4): assumed, the old flat default.
	defaultMemEff = 0.8
)

// cpuLaunchOverhead is an assumption: dispatching an operator on a CPU
// runtime costs about a microsecond of framework overhead.
const cpuLaunchOverhead = 1e-6

const (
	gib = 1 << 30
	tf  = 1e12
	gbs = 1e9
)

// presets holds the device type presets by canonical name. Preset hands
// out copies, so callers may modify what they get.
var presets = map[string]DeviceType{
	// NVIDIA Tesla V100 datasheet (PB-08608-001, SXM2 column): FP64 7.8,
	// FP32 15.7, Tensor (FP16) 125 TFLOPS; HBM2 900 GB/s; 16 or 32 GB.
	// https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
	// (the 125 tensor TFLOPS also in https://developer.nvidia.com/programming-tensor-cores-cuda-9-0).
	// Volta has no bfloat16, no TF32 and no int8 tensor cores: precision
	// amp-bf16 is refused on it (use amp-fp16), tf32 runs at FP32.
	"V100-16GB": {
		PeakFLOPS:       map[graph.DType]float64{graph.Float32: 15.7 * tf, graph.Float16: 125 * tf, graph.Float64: 7.8 * tf},
		MemoryBandwidth: 900 * gbs,
		LaunchOverhead:  gpuLaunchOverhead,
		Memory:          16 * gib,
		// SMs: 80 (V100 datasheet). Memory: assumed (defaultMemEff).
		Efficiency: Efficiency{Compute: cudaCoreEff, Tensor: tensorCoreEff, TensorConv: tensorConvEff, MatmulHalf: 80 * matmulHalfPerSM, Memory: defaultMemEff},
	},
	// Same datasheet and figures as V100-16GB, 32 GB variant.
	"V100-32GB": {
		PeakFLOPS:       map[graph.DType]float64{graph.Float32: 15.7 * tf, graph.Float16: 125 * tf, graph.Float64: 7.8 * tf},
		MemoryBandwidth: 900 * gbs,
		LaunchOverhead:  gpuLaunchOverhead,
		Memory:          32 * gib,
		Efficiency:      Efficiency{Compute: cudaCoreEff, Tensor: tensorCoreEff, TensorConv: tensorConvEff, MatmulHalf: 80 * matmulHalfPerSM, Memory: defaultMemEff},
	},
	// NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB column): FP64 Tensor
	// 19.5, FP32 19.5, TF32 156 (dense; 312 "with sparsity"), BF16 and
	// FP16 312 TFLOPS, INT8 624 TOPS; HBM2 1,555 GB/s.
	// https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
	"A100-40GB": {
		PeakFLOPS: map[graph.DType]float64{graph.Float32: 19.5 * tf, graph.Float16: 312 * tf, graph.BFloat16: 312 * tf,
			graph.Float64: 19.5 * tf, graph.Int8: 624 * tf},
		TF32FLOPS:       156 * tf,
		MemoryBandwidth: 1555 * gbs,
		LaunchOverhead:  gpuLaunchOverhead,
		Memory:          40 * gib,
		// SMs: 108 (NVIDIA A100 Tensor Core GPU Architecture whitepaper).
		// Memory: 0.88, as measured on the 80GB part (below).
		Efficiency: Efficiency{Compute: cudaCoreEff, Tensor: tensorCoreEff, TensorConv: tensorConvEff, MatmulHalf: 108 * matmulHalfPerSM, Memory: 0.88},
	},
	// NVIDIA A100 datasheet (same URL), SXM 80GB column: compute as the
	// 40GB part (TF32 156, BF16/FP16 312 dense); HBM2e 2,039 GB/s.
	"A100-80GB": {
		PeakFLOPS: map[graph.DType]float64{graph.Float32: 19.5 * tf, graph.Float16: 312 * tf, graph.BFloat16: 312 * tf,
			graph.Float64: 19.5 * tf, graph.Int8: 624 * tf},
		TF32FLOPS:       156 * tf,
		MemoryBandwidth: 2039 * gbs,
		LaunchOverhead:  gpuLaunchOverhead,
		Memory:          80 * gib,
		// SMs: 108. Memory: 0.88, a streaming read kernel at 1.80 of
		// 2.04 TB/s, confirmed by Nsight Compute at 88% of peak; NVIDIA's
		// reply there puts the best kernels near 90%:
		// https://forums.developer.nvidia.com/t/trouble-to-reach-peak-bandwidth-of-a100/339083
		Efficiency: Efficiency{Compute: cudaCoreEff, Tensor: tensorCoreEff, TensorConv: tensorConvEff, MatmulHalf: 108 * matmulHalfPerSM, Memory: 0.88},
	},
	// NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP64 Tensor
	// 67, FP32 67, TF32 989, BF16 and FP16 1,979, FP8 and INT8 3,958
	// TFLOPS — those tensor figures are "with sparsity", so half of each
	// is used here (TF32 494.5, BF16/FP16 989.5 dense); HBM3 3.35 TB/s;
	// 80 GB. https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
	"H100-80GB": {
		PeakFLOPS: map[graph.DType]float64{graph.Float32: 67 * tf, graph.Float16: 989.5 * tf, graph.BFloat16: 989.5 * tf,
			graph.Float64: 67 * tf, graph.Int8: 1979 * tf, graph.Float8E4M3FN: 1979 * tf, graph.Float8E5M2: 1979 * tf},
		TF32FLOPS:       494.5 * tf,
		MemoryBandwidth: 3350 * gbs,
		LaunchOverhead:  gpuLaunchOverhead,
		Memory:          80 * gib,
		// SMs: 132 (H100 SXM5). Compute, tensor and memory were measured
		// on an H100 80GB HBM3 lent to this project (scripts/gpu_runs.py,
		// 2026-11-24, testdata/measured/h100.yaml): an 8192^3 float32
		// GEMM (TF32 off) at 51.1 of 67 TFLOP/s, 0.76; bfloat16 at 776.9
		// of 989.5, 0.785; a device-to-device copy at 2,971 of 3,350 GB/s
		// (read plus written), 0.887. (A published figure, coalesced
		// loads at 2.8 of 3.35 TB/s by Nsight Compute,
		// https://mikamirai.com/blog/gpu-memory-bandwidth/, is 0.84.)
		// Large-GEMM ceilings, not fits to model runs: every model case
		// of that file stays held out.
		Efficiency: Efficiency{Compute: 0.76, Tensor: 0.785, TensorConv: tensorConvEff, MatmulHalf: 132 * matmulHalfPerSM, Memory: 0.887},
	},
	// NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1, mixed precision
	// (FP16) 65 TFLOPS, INT8 130 TOPS; GDDR6 320+ GB/s; 16 GB.
	// https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
	// Turing has no bfloat16 and no TF32 (amp-bf16 refused, as V100). The
	// datasheet gives no FP64 figure; Turing runs FP64 at 1/32 of FP32,
	// about 0.25 TFLOPS.
	"T4": {
		PeakFLOPS: map[graph.DType]float64{graph.Float32: 8.1 * tf, graph.Float16: 65 * tf,
			graph.Float64: 0.25 * tf, graph.Int8: 130 * tf},
		MemoryBandwidth: 320 * gbs,
		LaunchOverhead:  gpuLaunchOverhead,
		Memory:          16 * gib,
		// SMs: 40. Clock: the 70 W cap holds the T4 far below its
		// 1,590 MHz boost under sustained math: a cuBLAS 4096^3 HGEMM runs
		// at about 24 of 65 TFLOPS, which NVIDIA's reply attributes to
		// power capping,
		// https://forums.developer.nvidia.com/t/about-gpu-peak-performance/264462
		// 24/65 = 0.37 of peak; over a 0.7 kernel efficiency at full clock
		// (assumed, the old flat default) that is a sustained clock of
		// 0.53 (about 840 MHz), applied to every compute peak (float32
		// included: assumed, no float32 measurement found). Memory:
		// assumed (defaultMemEff); GDDR6 is not clocked down with the SMs.
		Efficiency: Efficiency{Compute: cudaCoreEff, Tensor: tensorCoreEff, TensorConv: tensorConvEff, MatmulHalf: 40 * matmulHalfPerSM,
			Memory: defaultMemEff, Clock: 0.53},
	},
	// A generic modern server CPU socket; an assumption, not a datasheet:
	// 32 cores at 2.0 GHz with two AVX-512 FMA units each (32 fp32
	// FLOP/cycle) is 2.05 TFLOP/s fp32 and half that in fp64; eight
	// channels of DDR4-3200 are 204.8 GB/s; 256 GiB of RAM. Half types
	// run at the fp32 rate (converted to fp32 for compute).
	"CPU": {
		PeakFLOPS:       map[graph.DType]float64{graph.Float32: 2 * tf, graph.Float64: 1 * tf},
		MemoryBandwidth: 200 * gbs,
		LaunchOverhead:  cpuLaunchOverhead,
		Memory:          256 * gib,
	},
}

// Preset returns a copy of the named device type preset. Names match
// case-insensitively ("v100-16gb" finds V100-16GB); the copy carries the
// canonical name.
func Preset(name string) (*DeviceType, bool) {
	canon, ok := presetName(name)
	if !ok {
		return nil, false
	}
	p := presets[canon]
	t := p.clone()
	t.Name = canon
	return t, true
}

// PresetNames lists the device type presets in sorted order.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// presetName finds the canonical spelling of a preset name.
func presetName(name string) (string, bool) {
	if _, ok := presets[name]; ok {
		return name, true
	}
	for _, n := range PresetNames() {
		if strings.EqualFold(n, name) {
			return n, true
		}
	}
	return "", false
}

// clone copies t, including its PeakFLOPS map.
func (t *DeviceType) clone() *DeviceType {
	c := *t
	c.PeakFLOPS = make(map[graph.DType]float64, len(t.PeakFLOPS))
	for k, v := range t.PeakFLOPS {
		c.PeakFLOPS[k] = v
	}
	return &c
}

// Link presets. Bandwidths are one direction, which is what one transfer
// uses; latencies are assumptions for a small transfer including software
// overhead (cudaMemcpy over PCIe or NVLink costs a few microseconds;
// RDMA over InfiniBand or RoCE a few more).
var linkPresets = map[string]Link{
	// PCI Express x16: 8, 16 and 32 GT/s per lane give 15.75, 31.5 and
	// 63 GB/s after 128b/130b encoding; rounded as usually quoted.
	"pcie3": {Kind: "pcie", Bandwidth: 16 * gbs, Latency: 10e-6},
	"pcie4": {Kind: "pcie", Bandwidth: 32 * gbs, Latency: 10e-6},
	"pcie5": {Kind: "pcie", Bandwidth: 64 * gbs, Latency: 10e-6},
	// NVSwitch systems join every GPU pair at a GPU's full NVLink
	// bandwidth: HGX A100 (NVLink 3, 12 links x 25 GB/s = 300 GB/s per
	// direction) and HGX H100 (NVLink 4, 18 x 25 = 450 GB/s), per the A100
	// and H100 datasheets' "600 GB/s" and "900 GB/s" bidirectional.
	"nvswitch-a100": {Kind: "nvlink", Bandwidth: 300 * gbs, Latency: 2e-6},
	"nvswitch-h100": {Kind: "nvlink", Bandwidth: 450 * gbs, Latency: 2e-6},
	// Network links at their line rate; latency assumes RDMA.
	"eth25":  {Kind: "network", Bandwidth: 25e9 / 8, Latency: 5e-6},
	"eth100": {Kind: "network", Bandwidth: 100e9 / 8, Latency: 5e-6},
	"ib-edr": {Kind: "network", Bandwidth: 100e9 / 8, Latency: 5e-6},
	"ib-hdr": {Kind: "network", Bandwidth: 200e9 / 8, Latency: 5e-6},
	"ib-ndr": {Kind: "network", Bandwidth: 400e9 / 8, Latency: 5e-6},
}

// DefaultCollectiveEfficiency is the fraction of a link's line rate
// NCCL's ring collectives reach on a link of this kind (bus bandwidth, as
// nccl-tests reports it, over line rate), where the cluster file gives
// none:
//
//   - nvlink 0.8: NCCL's maintainer on H100's NVLink, "450GB/s is the
//     line rate. With the protocol overhead (~20%) NCCL can get an
//     effective NVLink bandwidth of 370GB/s" (busBw of a ring),
//     https://github.com/NVIDIA/nccl-tests/issues/212. Users of 8 A100s
//     report ring all-reduce busbw of 200-208 GB/s of 300 (0.67-0.69,
//     nccl-tests issues 149 and 178), so 0.8 is the optimistic end.
//   - network 0.85: 3 hosts of 8 A100s, 4 HDR InfiniBand cards each
//     (100 GB/s per host's 8 GPUs), all_reduce_perf up to 128 MB: 84.8
//     GB/s busbw on average, 96 at the peak,
//     https://github.com/NVIDIA/nccl-tests/issues/119.
//   - pcie 0.8: no measurement found; the protocol overhead the NVLink
//     figure states, assumed.
//
// Any other kind: 1, the line rate.
func DefaultCollectiveEfficiency(kind string) float64 {
	switch kind {
	case "nvlink", "pcie":
		return 0.8
	case "network":
		return 0.85
	}
	return 1
}

// defaultIntra is the intra-host link of a host that names none: PCIe
// 3.0 x16, the slowest common case, so an unconfigured cluster does not
// look faster than it is.
var defaultIntra = linkPresets["pcie3"]

// defaultNetwork is the network between hosts when a cluster file names
// none: 100 Gb/s Ethernet with RDMA.
var defaultNetwork = linkPresets["eth100"]

// defaultLaunchOverhead is the launch overhead of a device type declared
// without one and without a base preset.
const defaultLaunchOverhead = gpuLaunchOverhead

// LinkPreset returns the named link preset (pcie3, nvswitch-a100, eth100,
// ...); names are case-insensitive.
func LinkPreset(name string) (Link, bool) {
	for _, n := range LinkPresetNames() {
		if strings.EqualFold(n, name) {
			return linkPresets[n], true
		}
	}
	return Link{}, false
}

// LinkPresetNames lists the link presets in sorted order.
func LinkPresetNames() []string {
	names := make([]string, 0, len(linkPresets))
	for n := range linkPresets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
