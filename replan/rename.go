package replan

import (
	"math"

	"github.com/opplace/opplace/cluster"
)

// renaming is the permutation of a new cluster's devices that keeps the
// most of a candidate's state where the old plan left it: within each
// class of interchangeable devices (one type, one memory size, one host:
// devices whose places in the cluster's links the simulator cannot tell
// apart wherever every pair inside a host is joined alike), the work of
// device d goes to the device perm[d] that lacks the fewest of the bytes
// d's work needs, solved as an assignment problem (Hungarian method);
// ties keep a device's own work. It returns nil when the identity is as
// good.
func (m *migrator) renaming(need holdings) []int {
	c := m.c
	nd := len(c.Devices)
	perm := make([]int, nd)
	for d := range perm {
		perm[d] = d
	}
	moved := false
	for _, class := range classes(c) {
		n := len(class)
		if n < 2 {
			continue
		}
		// cost[i][j]: device class[j] doing class[i]'s work, lexically
		// (bytes it lacks, whether it is another device).
		cost := make([][]int64, n)
		any := false
		for i, d := range class {
			cost[i] = make([]int64, n)
			for j, e := range class {
				var lack int64
				if need[d] != nil {
					lack = m.missing(need[d], e)
				}
				cost[i][j] = lack * int64(n+1)
				if i != j {
					cost[i][j]++
				}
				any = any || lack > 0
			}
		}
		if !any {
			continue
		}
		for i, j := range assign(cost) {
			perm[class[i]] = class[j]
			moved = moved || i != j
		}
	}
	if !moved {
		return nil
	}
	return perm
}

// classes groups a cluster's devices by type, memory and host, each class
// in index order.
func classes(c *cluster.Cluster) [][]int {
	type key struct {
		typ  *cluster.DeviceType
		mem  int64
		host int
	}
	at := map[key]int{}
	var out [][]int
	for d := range c.Devices {
		k := key{c.Devices[d].Type, c.Devices[d].Memory, c.Devices[d].Host}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], d)
	}
	return out
}

// assign solves the square assignment problem of cost (rows to columns,
// least total cost) by the Hungarian method with potentials, O(n^3); it
// returns each row's column. Equal totals resolve the same way every run.
func assign(cost [][]int64) []int {
	n := len(cost)
	const inf = math.MaxInt64 / 4
	u := make([]int64, n+1)
	v := make([]int64, n+1)
	p := make([]int, n+1) // p[j]: the row matched to column j (1-based), 0 none
	way := make([]int, n+1)
	for i := 1; i <= n; i++ {
		p[0] = i
		j0 := 0
		minv := make([]int64, n+1)
		used := make([]bool, n+1)
		for j := range minv {
			minv[j] = inf
		}
		for {
			used[j0] = true
			i0, delta, j1 := p[j0], int64(inf), 0
			for j := 1; j <= n; j++ {
				if used[j] {
					continue
				}
				if cur := cost[i0-1][j-1] - u[i0] - v[j]; cur < minv[j] {
					minv[j], way[j] = cur, j0
				}
				if minv[j] < delta {
					delta, j1 = minv[j], j
				}
			}
			for j := 0; j <= n; j++ {
				if used[j] {
					u[p[j]] += delta
					v[j] -= delta
				} else {
					minv[j] -= delta
				}
			}
			j0 = j1
			if p[j0] == 0 {
				break
			}
		}
		for j0 != 0 {
			j1 := way[j0]
			p[j0] = p[j1]
			j0 = j1
		}
	}
	out := make([]int, n)
	for j := 1; j <= n; j++ {
		out[p[j]-1] = j - 1
	}
	return out
}
