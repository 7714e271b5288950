package plan

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
)

// WriteFusedDOT draws the placed graph like WriteDOT, with every fused
// group drawn as a dashed cluster inside its device's cluster. groups
// lists each fused group as its name followed by its members' op names;
// a fused group never spans devices, so it nests in one device cluster.
func WriteFusedDOT(w io.Writer, p *Plan, g *graph.Graph, groups [][]string) error {
	var buf bytes.Buffer
	if err := WriteDOT(&buf, p, g); err != nil {
		return err
	}
	groupOf := map[string]int{}
	for k, grp := range groups {
		for _, name := range grp[1:] {
			groupOf[name] = k
		}
	}
	// WriteDOT writes each device cluster's op lines as
	//     "name" [label=..., fillcolor=...];
	// between "subgraph" and "}" lines. Op lines of a fused group are
	// gathered into a nested cluster at the group's first member.
	lines := strings.Split(buf.String(), "\n")
	var out []string
	var pending map[int][]string
	var order []int
	inDevice := false
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "  subgraph "):
			inDevice, pending, order = true, map[int][]string{}, nil
			out = append(out, line)
			continue
		case inDevice && line == "  }":
			for _, k := range order {
				out = append(out, fmt.Sprintf("    subgraph %s {", strconv.Quote(fmt.Sprintf("cluster_fused_%d", k))))
				out = append(out, fmt.Sprintf("      label=%s;\n      style=dashed;\n      color=\"#555555\";", strconv.Quote("fused: "+groups[k][0])))
				for _, l := range pending[k] {
					out = append(out, "  "+l)
				}
				out = append(out, "    }")
			}
			inDevice = false
			out = append(out, line)
			continue
		case inDevice && strings.HasPrefix(line, "    \""):
			name, err := strconv.QuotedPrefix(strings.TrimPrefix(line, "    "))
			if err == nil {
				if n, err := strconv.Unquote(name); err == nil {
					if k, ok := groupOf[n]; ok {
						if _, seen := pending[k]; !seen {
							order = append(order, k)
						}
						pending[k] = append(pending[k], line)
						continue
					}
				}
			}
		}
		out = append(out, line)
	}
	_, err := io.WriteString(w, strings.Join(out, "\n"))
	return err
}
