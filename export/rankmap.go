package export

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"

	"github.com/opplace/opplace/plan"
)

func init() {
	Register("rank-map", "JSON: where each rank runs (host, local rank, GPU index on its host) and what it runs (stage, replica, member of its replica's group), with each host's process count and CUDA_VISIBLE_DEVICES and the data-parallel, tensor-parallel and pipeline groups as rank lists; any plan",
		func() Target { return rankMapTarget{} })
	Register("hostfile", "text: a DeepSpeed/MPI hostfile, one line per host of the plan (\"node0 slots=4\"), in the ranks' order; any plan",
		func() Target { return hostfile{} })
}

// RankMap is where each process of a launched plan runs and what it runs.
// Ranks are numbered as torchrun numbers them: the hosts in the order of
// the plan's devices, each host's ranks contiguous, local ranks in the
// order of the plan's devices on that host. Field names are a contract
// with the scripts that read it: extend, never rename.
type RankMap struct {
	Plan      string `json:"plan"`
	Model     string `json:"model"`
	Strategy  string `json:"strategy"`
	WorldSize int    `json:"world_size"`
	// Hosts are the hosts that run ranks, in rank order: their process
	// count (torchrun's --nproc-per-node, the hostfile's slots), their
	// node rank (--node-rank) and the GPU indices to expose, in local
	// rank order (CUDA_VISIBLE_DEVICES), when the plan leaves some of
	// the host's GPUs idle or uses them out of order.
	Hosts []RankHost `json:"hosts"`
	Ranks []Rank     `json:"ranks"`
	// DataParallel lists, per stage and member, the ranks holding the
	// same ops on different replicas: those that all-reduce their
	// gradients together (one list per group).
	DataParallel [][]int `json:"data_parallel_groups"`
	// TensorParallel lists the ranks of each tensor-parallel group (the
	// devices of one replica of a stage that splits its ops); absent for
	// plans without tensor parallelism.
	TensorParallel [][]int `json:"tensor_parallel_groups,omitempty"`
	// Pipeline lists, for each replica and member, the ranks a
	// micro-batch passes through, stage after stage; present when the
	// plan has several stages of equal replica and group counts (the
	// layout Megatron-LM and DeepSpeed launch).
	Pipeline [][]int `json:"pipeline_groups,omitempty"`
}

// RankHost is one host of a rank map.
type RankHost struct {
	Host               string `json:"host"`
	NodeRank           int    `json:"node_rank"`
	Processes          int    `json:"processes"`
	FirstRank          int    `json:"first_rank"`
	CUDAVisibleDevices []int  `json:"cuda_visible_devices,omitempty"`
}

// Rank is one process of a rank map.
type Rank struct {
	Rank      int    `json:"rank"`
	Device    string `json:"device"`
	Type      string `json:"device_type"`
	Host      string `json:"host"`
	LocalRank int    `json:"local_rank"`
	// GPU is the device's index among its host's devices in the cluster
	// file: the CUDA device index when the file lists them in order.
	GPU   int `json:"gpu"`
	Stage int `json:"stage"`
	// Replica is which of the stage's replicas the rank belongs to, and
	// Member its place in that replica's devices (its tensor-parallel
	// rank when the stage splits its ops; 0 for a replica of one device).
	Replica int `json:"replica"`
	Member  int `json:"member"`
	// Ops counts the ops the rank runs: those the plan places on the
	// first replica's device in its place (the other replicas run the
	// same ops on their share of the batch), or in a tensor-parallel
	// stage every op of the stage (each member runs its shard of each).
	Ops int `json:"ops"`
}

// BuildRankMap numbers the processes of plan p and says where each runs
// and what it runs. A plan with no device in its stages is refused.
func BuildRankMap(p *plan.Plan, o Options) (*RankMap, error) {
	type slot struct{ stage, replica, member int }
	used := map[string]slot{}
	for _, st := range p.Stages {
		for r, group := range replicaGroups(st) {
			for m, d := range group {
				if _, dup := used[d]; dup {
					return nil, errorf(Invalid, "%s: device %q runs in two places of the plan (stage %d); the plan is corrupt", o.source(), d, st.Index)
				}
				used[d] = slot{st.Index, r, m}
			}
		}
	}
	if len(used) == 0 {
		return nil, errorf(Invalid, "%s: the plan's stages name no devices: nothing to launch", o.source())
	}
	rm := &RankMap{Plan: o.source(), Model: p.Model, Strategy: p.Strategy}
	gpu := map[string]int{}     // device -> index on its host
	perHost := map[string]int{} // devices seen per host
	var hosts []string
	for _, d := range p.Devices {
		gpu[d.Name] = perHost[d.Host]
		perHost[d.Host]++
		if _, ok := used[d.Name]; ok && !slices.Contains(hosts, d.Host) {
			hosts = append(hosts, d.Host)
		}
	}
	placed := map[string]int{}
	for _, op := range p.Ops {
		placed[op.Device]++
	}
	ops := map[slot]int{} // by stage and member, replica 0
	for _, st := range p.Stages {
		group := replicaGroups(st)[0]
		for m, d := range group {
			if st.TensorParallel > 1 {
				for _, e := range group {
					ops[slot{st.Index, 0, m}] += placed[e]
				}
			} else {
				ops[slot{st.Index, 0, m}] = placed[d]
			}
		}
	}
	rankOf := map[string]int{}
	for n, h := range hosts {
		host := RankHost{Host: h, NodeRank: n, FirstRank: len(rm.Ranks)}
		var visible []int
		for _, d := range p.Devices {
			s, ok := used[d.Name]
			if d.Host != h || !ok {
				continue
			}
			rankOf[d.Name] = len(rm.Ranks)
			rm.Ranks = append(rm.Ranks, Rank{Rank: len(rm.Ranks), Device: d.Name, Type: d.Type, Host: h, LocalRank: host.Processes,
				GPU: gpu[d.Name], Stage: s.stage, Replica: s.replica, Member: s.member, Ops: ops[slot{s.stage, 0, s.member}]})
			visible = append(visible, gpu[d.Name])
			host.Processes++
		}
		if len(visible) != perHost[h] {
			host.CUDAVisibleDevices = visible
		}
		rm.Hosts = append(rm.Hosts, host)
	}
	rm.WorldSize = len(rm.Ranks)
	ranks := func(devices []string) []int {
		out := make([]int, len(devices))
		for i, d := range devices {
			out[i] = rankOf[d]
		}
		return out
	}
	uniform := len(p.Stages) > 1
	for _, st := range p.Stages {
		groups := replicaGroups(st)
		for m := range groups[0] {
			var dp []string
			for _, g := range groups {
				if m < len(g) {
					dp = append(dp, g[m])
				}
			}
			rm.DataParallel = append(rm.DataParallel, ranks(dp))
		}
		if st.TensorParallel > 1 {
			for _, g := range groups {
				rm.TensorParallel = append(rm.TensorParallel, ranks(g))
			}
		}
		first := replicaGroups(p.Stages[0])
		uniform = uniform && len(groups) == len(first) && len(groups[0]) == len(first[0])
	}
	if uniform {
		first := replicaGroups(p.Stages[0])
		for r := range first {
			for m := range first[r] {
				var path []string
				for _, st := range p.Stages {
					path = append(path, replicaGroups(st)[r][m])
				}
				rm.Pipeline = append(rm.Pipeline, ranks(path))
			}
		}
	}
	return rm, nil
}

// replicaGroups are a stage's devices grouped by replica: its
// replica_devices, or one device per replica.
func replicaGroups(st plan.Stage) [][]string {
	if len(st.ReplicaDevices) > 0 {
		return st.ReplicaDevices
	}
	out := make([][]string, len(st.Devices))
	for i, d := range st.Devices {
		out[i] = []string{d}
	}
	return out
}

type rankMapTarget struct{}

func (rankMapTarget) Export(w io.Writer, p *plan.Plan, o Options) error {
	rm, err := BuildRankMap(p, o)
	if err != nil {
		return err
	}
	return writeJSON(w, rm)
}

// hostfile writes the hosts of the rank map as DeepSpeed's launcher (and
// OpenMPI's) reads them: "HOST slots=N", in rank order.
type hostfile struct{}

func (hostfile) Export(w io.Writer, p *plan.Plan, o Options) error {
	rm, err := BuildRankMap(p, o)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# hosts of %s (strategy %s, %d ranks), written by opplace export (target hostfile)\n", comment(o.source()), comment(p.Strategy), rm.WorldSize)
	for _, h := range rm.Hosts {
		if h.CUDAVisibleDevices != nil {
			fmt.Fprintf(&b, "# %s: CUDA_VISIBLE_DEVICES=%s\n", comment(h.Host), joinInts(h.CUDAVisibleDevices))
		}
	}
	for _, h := range rm.Hosts {
		if !hostName.MatchString(h.Host) {
			return errorf(Invalid, "%s: host %q is no host name a hostfile can hold (letters, digits, '.', '-', '_' and ':')", o.source(), h.Host)
		}
		fmt.Fprintf(&b, "%s slots=%d\n", h.Host, h.Processes)
	}
	_, err = w.Write(b.Bytes())
	return err
}

func joinInts(xs []int) string {
	var b bytes.Buffer
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}

// hostName is what a hostfile line can start with: a host name or
// address, nothing a shell or the launcher's parser would split.
var hostName = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)
