package view

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/cluster"
)

func formatBytes(b int64) string { return cluster.FormatBytes(b) }

// traffic sums the copies between two endpoints (devices or stages).
type traffic struct {
	copies int
	bytes  int64
	ms     float64
}

func (t *traffic) label() string {
	return fmt.Sprintf("%s in %s\n%s", formatBytes(t.bytes), count(t.copies, "copy", "copies"), formatMS(t.ms))
}

// sumTraffic adds up the plan's transfers by the endpoints key gives
// them; pairs a key maps to the same endpoint are dropped.
func sumTraffic(l *layout, key func(dev int) int) (map[[2]int]*traffic, [][2]int) {
	out := map[[2]int]*traffic{}
	for _, tr := range l.p.Transfers {
		from, to := key(l.devIndex[tr.From]), key(l.devIndex[tr.To])
		if from == to || from < 0 || to < 0 {
			continue
		}
		t := out[[2]int{from, to}]
		if t == nil {
			t = &traffic{}
			out[[2]int{from, to}] = t
		}
		t.copies++
		t.bytes += tr.Bytes
		t.ms += tr.EndMS - tr.StartMS
	}
	keys := make([][2]int, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	return out, keys
}

// writeDevices draws one node per device that runs ops, in stage
// clusters when the plan is staged, and one edge per pair of devices
// that exchange tensors. Devices that only mirror a replica or sit idle
// are listed, not drawn.
func writeDevices(d *dot, l *layout) {
	drawn := map[int]bool{}
	drawStages(d, l, func(dev int) {
		if l.p.Devices[dev].Ops > 0 {
			drawn[dev] = true
			d.node(fmt.Sprintf("d%d", dev), attr{"label", deviceLabel(l.p, dev)}, attr{"fillcolor", color(dev)})
		}
	})
	var idle []string
	mirrors := 0
	for dev := range l.p.Devices {
		switch {
		case drawn[dev]:
		case l.stageOf[dev] >= 0:
			mirrors++
		default:
			idle = append(idle, l.p.Devices[dev].Name)
		}
	}
	if len(idle) > 0 || mirrors > 0 {
		s := ""
		if mirrors > 0 {
			s = fmt.Sprintf("%s more run replicas of the devices drawn", count(mirrors, "device", "devices"))
		}
		if len(idle) > 0 {
			if s != "" {
				s += "\n"
			}
			s += fmt.Sprintf("unused: %s", joinShort(idle, 8))
		}
		d.node("others", attr{"label", s}, attr{"shape", "note"}, attr{"fillcolor", idleColor})
	}
	drawTraffic(d, l, "d", func(dev int) int { return dev })
}

// writeStages draws one node per stage and the tensors stages send
// each other.
func writeStages(d *dot, l *layout) {
	stages := l.p.Stages
	for k := range stages {
		st := &stages[k]
		label := fmt.Sprintf("stage %d on %s (%s)\n%s, %s per micro-batch (compute %s, sends %s, sync %s)\npeak %s per device",
			st.Index, joinShort(st.Devices, 4), st.DeviceType, count(len(st.Ops), "op", "ops"), formatMS(st.TimeMS), formatMS(st.ComputeMS),
			formatMS(st.CommMS), formatMS(st.SyncMS), formatBytes(st.PeakMemoryBytes))
		if st.Replicas > 1 {
			label += fmt.Sprintf("\n%d replicas, all-reduce %s in %s", st.Replicas, formatBytes(st.AllReduceBytes), formatMS(st.AllReduceMS))
		}
		if m := st.Modules(); m != "" {
			label += "\nmodules " + m
		}
		if st.FirstOp != "" {
			label += fmt.Sprintf("\n%s .. %s", st.FirstOp, st.LastOp)
		}
		dev := 0
		if len(st.Devices) > 0 {
			dev = l.devIndex[st.Devices[0]]
		}
		d.node(fmt.Sprintf("s%d", st.Index), attr{"label", label}, attr{"fillcolor", color(dev)})
	}
	drawTraffic(d, l, "s", func(dev int) int { return l.stageOf[dev] })
}

// drawTraffic draws one edge per pair of endpoints (devices or stages,
// as key maps devices) that exchange tensors, wider for more bytes; flows
// far smaller than the largest are counted in a note, not drawn.
func drawTraffic(d *dot, l *layout, prefix string, key func(dev int) int) {
	sums, keys := sumTraffic(l, key)
	var most int64
	for _, k := range keys {
		most = max(most, sums[k].bytes)
	}
	hidden, hiddenBytes := 0, int64(0)
	for _, k := range keys {
		t := sums[k]
		if t.bytes*smallCopyRatio < most {
			hidden++
			hiddenBytes += t.bytes
			continue
		}
		d.edge(fmt.Sprintf("%s%d", prefix, k[0]), fmt.Sprintf("%s%d", prefix, k[1]), attr{"label", t.label()},
			attr{"color", transferColor}, attr{"fontcolor", transferColor},
			attr{"penwidth", fmt.Sprintf("%.1f", 1+3*float64(t.bytes)/float64(most))})
	}
	if hidden > 0 {
		d.node("small", attr{"label", fmt.Sprintf("%s not drawn\n(%s in all)", count(hidden, "smaller flow", "smaller flows"), formatBytes(hiddenBytes))},
			attr{"shape", "note"}, attr{"fillcolor", idleColor}, attr{"fontsize", "9"})
	}
}

// joinShort joins names, eliding the middle past n.
func joinShort(names []string, n int) string {
	if len(names) > n {
		names = append(slices.Clone(names[:n-1]), fmt.Sprintf("... (%d in all)", len(names)), names[len(names)-1])
	}
	s := ""
	for i, name := range names {
		if i > 0 {
			s += ", "
		}
		s += name
	}
	return s
}
