// Package costed reads operator graphs whose costs were already measured:
// "bring your own profile". A user whose profiler timed every op on every
// device type writes the graph as JSON and opplace plans it with those
// times instead of its analytic model.
//
// Two formats are read, told apart by content:
//
//   - opplace-costed-graph/v1, opplace's own documented format (see
//     File, and docs/costed-graphs.md): ops with a time per
//     device type name, parameter, output and scratch bytes, a colocation
//     group and a phase; edges with bytes and an optional explicit
//     transfer time.
//   - the input format of msr-fiddle/dnn-partitioning (Tarnawski et al.,
//     NeurIPS 2020): nodes with cpuLatency and fpgaLatency, edges with a
//     size. Its two device kinds map onto the cluster's types by name:
//     types whose name contains "CPU" take cpuLatency, every other type
//     takes fpgaLatency (see dnn.go).
//
// Either becomes a graph.Graph plus Costs, a cost.Model that answers each
// op's measured time by device type and +Inf where none was measured.
package costed
