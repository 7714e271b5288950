package cluster

import (
	"errors"
	"strings"
	"testing"
)

// errorCases are invalid cluster files with the line and field their
// error must name and substrings its message must contain. The fuzz
// target also seeds from them.
var errorCases = []struct {
	name  string
	src   string
	line  int
	field string
	msg   []string
}{
	// File-level problems.
	{"empty", "", 0, "", []string{"file is empty"}},
	{"blank", " \n\n\t\n", 0, "", []string{"file is empty"}},
	{"comments only", "# nothing\n# here\n", 0, "", []string{"no YAML document"}},
	{"null document", "~\n", 1, "", []string{"file is empty"}},
	{"not yaml", "devices: [gpu0\n", 1, "", []string{"not valid YAML"}},
	{"tab indent", "devices:\n\t- {name: g, type: T4}\n", 2, "", []string{"not valid YAML"}},
	{"binary", "\x08\x01\x12\x00onnx\xff", 0, "", []string{"not valid YAML"}},
	{"scalar document", "hello world\n", 1, "", []string{"expected a mapping", `"hello world"`}},
	{"list document", "- {name: g, type: T4}\n", 1, "", []string{"expected a mapping", "found a list"}},
	{"two documents", "devices: [{name: g, type: T4}]\n---\ndevices: [{name: h, type: T4}]\n", 2, "", []string{"more than one YAML document"}},

	// Keys.
	{"unknown top key", "device:\n  - {name: g, type: T4}\n", 1, "",
		[]string{`unknown field "device" (known: name, device_types, hosts, devices, links, network)`, `did you mean "devices"?`}},
	{"unknown device key", "devices:\n  - {name: gpu0, type: V100-16GB}\n  - {name: gpu1, type: V100-16GB, memroy: 16GiB}\n", 3, "devices[1]",
		[]string{`unknown field "memroy" (known: name, type, host, memory, count)`, `did you mean "memory"?`}},
	{"duplicate key", "devices:\n  - name: g\n    type: T4\n    name: h\n", 4, "devices[0].name", []string{"given twice (first at line 2)"}},
	{"empty value", "devices:\n  - name: g\n    type: T4\n    memory:\n", 4, "devices[0].memory", []string{"has no value"}},
	{"merge key", "x: &x {type: T4}\ndevices:\n  - {<<: *x, name: g}\n", 1, "", []string{`unknown field "x"`}},

	// NCCL's share of a link.
	{"collective efficiency above 1", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - {between: [a, b], bandwidth: 10GB/s, latency: 1us, collective_efficiency: 1.5}\n", 3, "links[0].collective_efficiency",
		[]string{"must be at most 1", "found 1.5"}},
	{"collective efficiency zero", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - {between: [a, b], bandwidth: 10GB/s, latency: 1us, collective_efficiency: 0}\n", 3, "links[0].collective_efficiency",
		[]string{"must be positive"}},

	// The achievable-speed model.
	{"efficiency above 1", "device_types:\n  - name: T4\n    efficiency: {memory: 1.2}\ndevices: [{name: g, type: T4}]\n", 3, "device_types[0].efficiency.memory",
		[]string{"must be at most 1", "found 1.2"}},
	{"efficiency zero", "device_types:\n  - name: T4\n    efficiency:\n      clock: 0\ndevices: [{name: g, type: T4}]\n", 4, "device_types[0].efficiency.clock",
		[]string{"must be positive"}},
	{"efficiency not a number", "device_types:\n  - name: T4\n    efficiency: {compute: fast}\ndevices: [{name: g, type: T4}]\n", 3, "device_types[0].efficiency.compute",
		[]string{`"fast" is not a fraction`}},
	{"efficiency unknown key", "device_types:\n  - name: T4\n    efficiency: {tensr: 0.5}\ndevices: [{name: g, type: T4}]\n", 3, "device_types[0].efficiency",
		[]string{`unknown field "tensr"`, `did you mean "tensor"?`}},
	{"efficiency not a mapping", "device_types:\n  - name: T4\n    efficiency: 0.5\ndevices: [{name: g, type: T4}]\n", 3, "device_types[0].efficiency",
		[]string{"expected a mapping"}},

	// Threads.
	{"threads zero", "device_types:\n  - name: cpu\n    base: CPU\n    threads: 0\ndevices: [{name: g, type: cpu}]\n", 4, "device_types[0].threads",
		[]string{"threads must be a positive whole number", `"0"`}},
	{"threads fraction", "device_types:\n  - {name: cpu, base: CPU, threads: 1.5}\ndevices: [{name: g, type: cpu}]\n", 2, "device_types[0].threads",
		[]string{"threads must be a positive whole number", `"1.5"`}},
	{"threads huge", "device_types:\n  - {name: cpu, base: CPU, threads: 999999}\ndevices: [{name: g, type: cpu}]\n", 2, "device_types[0].threads",
		[]string{"threads 999999 is more than"}},
	{"threads list", "device_types:\n  - {name: cpu, base: CPU, threads: [1, 2]}\ndevices: [{name: g, type: cpu}]\n", 2, "device_types[0].threads",
		[]string{"expected"}},

	// Required fields.
	{"no devices", "name: x\n", 1, "", []string{`missing required field "devices"`}},
	{"empty devices", "devices: []\n", 1, "devices", []string{"empty list"}},
	{"devices not a list", "devices: {name: g}\n", 1, "devices", []string{"expected a list, found a mapping"}},
	{"device not a mapping", "devices:\n  - gpu0\n", 2, "devices[0]", []string{"expected a mapping", `"gpu0"`}},
	{"device without type", "devices:\n  - {name: g, type: T4}\n  - name: h\n", 3, "devices[1]", []string{`missing required field "type"`, "V100-16GB"}},
	{"device without name", "devices:\n  - {type: T4}\n", 2, "devices[0]", []string{`missing required field "name"`}},
	{"type without peak_flops", "device_types:\n  - {name: X, memory_bandwidth: 1TB/s, memory: 1GiB}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0]",
		[]string{`missing required field "peak_flops"`}},
	{"type without float32", "device_types:\n  - name: X\n    peak_flops: {float16: 1T}\n    memory_bandwidth: 1TB/s\n    memory: 1GiB\ndevices: [{name: g, type: X}]\n", 3, "device_types[0].peak_flops",
		[]string{"missing float32"}},
	{"type without bandwidth", "device_types:\n  - {name: X, peak_flops: {float32: 1T}, memory: 1GiB}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0]",
		[]string{`missing required field "memory_bandwidth"`}},
	{"type without memory", "device_types:\n  - {name: X, peak_flops: {float32: 1T}, memory_bandwidth: 1TB/s}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0]",
		[]string{`missing required field "memory"`}},
	{"link without latency", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - {between: [a, b], bandwidth: 1GB/s}\n", 3, "links[0]",
		[]string{`missing required field "latency"`}},
	{"link without bandwidth", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - {between: [a, b], latency: 1us}\n", 3, "links[0]",
		[]string{`missing required field "bandwidth"`, "pcie3"}},
	{"link without between", "devices: [{name: a, type: T4}]\nlinks:\n  - {preset: pcie3}\n", 3, "links[0]", []string{`missing required field "between"`}},

	// Values.
	{"zero memory", "devices:\n  - {name: g, type: T4, memory: 0}\n", 2, "devices[0].memory", []string{"must be positive, found 0"}},
	{"negative memory", "devices:\n  - {name: g, type: T4, memory: -16GiB}\n", 2, "devices[0].memory", []string{"negative"}},
	{"zero bandwidth", "hosts:\n  - name: h\n    intra: {bandwidth: 0GB/s}\ndevices: [{name: g, type: T4, host: h}]\n", 3, "hosts[0].intra.bandwidth",
		[]string{"must be positive"}},
	{"negative bandwidth", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - between: [a, b]\n    bandwidth: -5GB/s\n    latency: 1us\n", 4, "links[0].bandwidth",
		[]string{"negative"}},
	{"negative latency", "network: {latency: -1us}\ndevices: [{name: g, type: T4}]\n", 1, "network.latency", []string{"negative"}},
	{"zero flops", "device_types:\n  - {name: X, base: T4, peak_flops: {float16: 0}}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0].peak_flops.float16",
		[]string{"must be positive"}},
	{"bad unit", "network: {bandwidth: 100Gb/s, latency: 5 parsecs}\ndevices: [{name: g, type: T4}]\n", 1, "network.latency",
		[]string{`unknown unit "parsecs"`, "us"}},
	{"bandwidth without unit", "network: {bandwidth: 100}\ndevices: [{name: g, type: T4}]\n", 1, "network.bandwidth", []string{"needs a unit", "100Gb/s"}},
	{"size as bandwidth", "network: {bandwidth: 100GB}\ndevices: [{name: g, type: T4}]\n", 1, "network.bandwidth", []string{`unknown unit "GB"`}},
	{"unreadable size", "devices:\n  - {name: g, type: T4, memory: lots}\n", 2, "devices[0].memory", []string{`cannot read "lots"`}},
	{"memory not scalar", "devices:\n  - {name: g, type: T4, memory: [1, 2]}\n", 2, "devices[0].memory", []string{"expected a single value, found a list"}},
	{"huge memory", "devices:\n  - {name: g, type: T4, memory: 2PiB}\n", 2, "devices[0].memory", []string{"implausibly large", "1 PiB", "check the unit"}},
	{"huge bandwidth", "network: {bandwidth: 200TB/s}\ndevices: [{name: g, type: T4}]\n", 1, "network.bandwidth", []string{"implausibly large", "100 TB/s"}},
	{"huge memory bandwidth", "device_types:\n  - {name: X, base: T4, memory_bandwidth: 1PB/s}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0].memory_bandwidth",
		[]string{"implausibly large"}},
	{"huge flops", "device_types:\n  - {name: X, base: T4, peak_flops: {float32: 2e18}}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0].peak_flops.float32",
		[]string{"implausibly large"}},
	{"huge latency", "network: {latency: 1000s}\ndevices: [{name: g, type: T4}]\n", 1, "network.latency", []string{"implausibly large"}},
	{"unknown dtype", "device_types:\n  - {name: X, base: T4, peak_flops: {float7: 1T}}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0].peak_flops",
		[]string{`unknown element type "float7"`}},
	{"dtype twice", "device_types:\n  - {name: X, base: T4, peak_flops: {fp32: 1T, float32: 2T}}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0].peak_flops.float32",
		[]string{"given twice"}},
	{"tf32 twice", "device_types:\n  - name: X\n    base: A100-80GB\n    peak_flops:\n      tf32: 156T\n      TF32: 150T\ndevices: [{name: g, type: X}]\n", 6, "device_types[0].peak_flops.TF32",
		[]string{"tf32 is given twice (first at line 5)"}},
	{"zero tf32", "device_types:\n  - {name: X, base: A100-80GB, peak_flops: {tf32: 0}}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0].peak_flops.tf32",
		[]string{"must be positive"}},
	{"bad count", "devices:\n  - {name: g, type: T4, count: 0}\n", 2, "devices[0].count", []string{"positive whole number"}},
	{"text count", "devices:\n  - {name: g, type: T4, count: four}\n", 2, "devices[0].count", []string{"positive whole number"}},
	{"huge count", "devices:\n  - {name: g, type: T4, count: 100000}\n", 2, "devices[0].count", []string{"more than the 16384"}},

	// Names and references.
	{"unknown type", "devices:\n  - {name: g, type: V100}\n", 2, "devices[0].type",
		[]string{`unknown device type "V100" (did you mean "V100-16GB" or "V100-32GB"?)`, "A100-40GB, A100-80GB, CPU, H100-80GB, T4, V100-16GB, V100-32GB", "device_types"}},
	{"misspelt type", "devices:\n  - {name: g, type: V100-16G}\n", 2, "devices[0].type", []string{`did you mean "V100-16GB"?`}},
	{"unknown base", "device_types:\n  - {name: X, base: TPUv4}\ndevices: [{name: g, type: X}]\n", 2, "device_types[0].base", []string{`unknown device type "TPUv4"`}},
	{"type declared twice", "device_types:\n  - {name: X, base: T4}\n  - {name: x, base: CPU}\ndevices: [{name: g, type: X}]\n", 3, "device_types[1].name",
		[]string{"declared twice (first at line 2)"}},
	{"undeclared host", "hosts: [{name: node0}]\ndevices:\n  - {name: g, type: T4, host: node1}\n", 3, "devices[0].host",
		[]string{`host "node1" is not declared`, `did you mean "node0"?`}},
	{"device without host", "hosts: [{name: node0}]\ndevices:\n  - {name: g, type: T4}\n", 3, "devices[0]", []string{`missing required field "host"`, "node0"}},
	{"host without hosts", "devices:\n  - {name: g, type: T4, host: node0}\n", 2, "devices[0].host", []string{"add a hosts: list", "host0"}},
	{"duplicate device", "devices:\n  - {name: g, type: T4}\n  - {name: g, type: CPU}\n", 3, "devices[1].name", []string{`"g" is already used at line 2`}},
	{"duplicate by count", "devices:\n  - {name: gpu1, type: T4}\n  - {name: gpu, type: T4, count: 2}\n", 3, "devices[1].name", []string{`"gpu1" is already used at line 2`}},
	{"duplicate host", "hosts:\n  - {name: h}\n  - {name: h}\ndevices: [{name: g, type: T4, host: h}]\n", 3, "hosts[1].name", []string{`"h" is already used`}},
	{"device named like host", "hosts: [{name: h}]\ndevices:\n  - {name: h, type: T4, host: h}\n", 3, "devices[0].name", []string{"device and host names must all differ"}},
	{"unknown endpoint", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - between: [a, b,\n      c]\n    preset: pcie4\n", 4, "links[0].between[2]",
		[]string{`unknown device or host "c"; declare it, or use one of a, b, host0`}},
	{"mixed endpoints", "hosts: [{name: h0}, {name: h1}]\ndevices: [{name: a, type: T4, host: h0}]\nlinks:\n  - {between: [h0, a], preset: eth100}\n", 4, "links[0].between[1]",
		[]string{`"a" is a device but "h0" is a host`, "not both"}},
	{"one endpoint", "devices: [{name: a, type: T4}]\nlinks:\n  - {between: [a], preset: pcie4}\n", 3, "links[0].between", []string{"at least two"}},
	{"endpoint twice", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - {between: [a, b, a], preset: pcie4}\n", 3, "links[0].between[2]", []string{"listed twice"}},
	{"pair linked twice", "devices: [{name: a, type: T4}, {name: b, type: T4}, {name: c, type: T4}]\nlinks:\n  - {between: [a, b, c], preset: pcie4}\n  - {between: [c, a], preset: pcie5}\n", 4, "links[1].between",
		[]string{"between a and c is already set at line 3"}},
	{"unknown link preset", "devices: [{name: a, type: T4}, {name: b, type: T4}]\nlinks:\n  - {between: [a, b], preset: nvlink9}\n", 3, "links[0].preset",
		[]string{`unknown link preset "nvlink9"`, "pcie3"}},
	{"unknown link key", "devices: [{name: a, type: T4}]\nnetwork: {bandwith: 1GB/s}\n", 2, "network",
		[]string{`unknown field "bandwith"`, `did you mean "bandwidth"?`}},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.src), "c.yaml")
			if err == nil {
				t.Fatalf("no error; got cluster %+v", c)
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is %T, not *FileError", err, err)
			}
			if fe.File != "c.yaml" || fe.Line != tt.line || fe.Field != tt.field {
				t.Errorf("error at %s:%d field %q, want c.yaml:%d field %q\n%v", fe.File, fe.Line, fe.Field, tt.line, tt.field, err)
			}
			for _, m := range tt.msg {
				if !strings.Contains(fe.Msg, m) {
					t.Errorf("message %q does not contain %q", fe.Msg, m)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestFileErrorFormat(t *testing.T) {
	_, err := Parse([]byte("devices:\n  - {name: gpu0, type: V100-16GB}\n  - {name: gpu1, type: V100-16GB, memroy: 16GiB}\n"), "c.yaml")
	want := `c.yaml:3: devices[1]: unknown field "memroy" (known: name, type, host, memory, count) (did you mean "memory"?)`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	tests := []struct {
		e    FileError
		want string
	}{
		{FileError{File: "x.yaml", Msg: "file is empty"}, "x.yaml: file is empty"},
		{FileError{File: "x.yaml", Line: 2, Msg: "bad"}, "x.yaml:2: bad"},
		{FileError{Line: 2, Field: "hosts", Msg: "bad", What: "cluster file"}, "cluster file:2: hosts: bad"},
		{FileError{Line: 2, Msg: "bad"}, "file:2: bad"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.e, got, tt.want)
		}
	}
}
