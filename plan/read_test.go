package plan_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/plan"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := sample()
	p.Ops[0].Runs = []plan.Run{{MicroBatch: 0, StartMS: 0, EndMS: 2}, {MicroBatch: 1, StartMS: 2, EndMS: 4}, {MicroBatch: 2, StartMS: 4, EndMS: 5}, {MicroBatch: 3, StartMS: 5, EndMS: 6}}
	stage := 1
	p.Ops[0].Stage = &stage
	p.Devices[0].Memory = []plan.MemorySample{{MS: 0, Bytes: 1}, {MS: 1, Bytes: 3}, {MS: 2, Bytes: 2}}
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	js, _ := json.Marshal(p)
	ym, _ := yaml.Marshal(p)
	for _, path := range []string{write("plan.json", js), write("plan.yaml", ym), write("yaml-named.json", ym)} {
		q, err := plan.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if q.Strategy != p.Strategy || len(q.Ops) != len(p.Ops) || len(q.Ops[0].Runs) != 4 || len(q.Devices[0].Memory) != 3 ||
			q.Ops[0].Stage == nil || *q.Ops[0].Stage != 1 || len(q.Ops) > 1 && q.Ops[1].Stage != nil {
			t.Errorf("%s: read back %+v", path, q)
		}
	}
	bad := []struct {
		name, data, want string
	}{
		{"empty.json", "  \n", "the file is empty"},
		{"truncated.json", string(js[:len(js)/2]), "not a valid JSON plan"},
		{"cluster.yaml", "name: c\nhosts:\n  - name: h\n", "not an opplace plan (it looks like a cluster file); give the plan file opplace plan writes"},
		{"garbage.yaml", "\x00\x01: [", "not an opplace plan (it is a binary file"},
		{"stray.json", `{"devices":[{"name":"a"}],"ops":[{"name":"x","device":"b"}],"predicted_step_ms":1}`, `op "x" is placed on "b"`},
		{"no-devices.json", `{"devices":[],"ops":[],"predicted_step_ms":1}`, "lists no devices"},
		// Documents that are no plan, each refused in one line that says
		// what it looks like and names no Go type.
		{"devices-only.yaml", "name: c\ndevices:\n  - {name: gpu0, type: V100-16GB, memory: 16GiB}\n", "not an opplace plan (it looks like a cluster file)"},
		{"costed.json", `{"format":"opplace-costed-graph/v1","ops":[],"edges":[]}`, "it looks like a costed graph"},
		{"placement.yaml", "fc1: gpu0\nfc2: gpu1\n", "it looks like a placement file"},
		{"list.json", "[1, 2, 3]", "not an opplace plan (it is a list, not a map of a plan's fields)"},
		{"list.yaml", "- a\n- b\n", "not an opplace plan (it is a list"},
		{"scalar.yaml", "just words\n", "not an opplace plan (it is a single value"},
		{"partial.json", `{"devices":[{"name":"a"}],"ops":[]}`, `not an opplace plan (it has no "predicted_step_ms")`},
		{"typed.yaml", "predicted_step_ms: 1\ndevices:\n  - {name: a, memory: 16GiB}\nops: []\n", "not a valid plan: line 3: expected a list, found a string `16GiB`"},
		{"typed.json", `{"predicted_step_ms": 1, "devices": [{"name": "a", "memory": "16GiB"}], "ops": []}`, "not a valid JSON plan: devices.memory: expected a list, found a string (the value ending at line 1:"},
		{"many.yaml", "predicted_step_ms: 1\ndevices: [[1], [2], [3]]\nops: []\n", "expected a map of fields, found a list (and 2 more such errors)"},
		{"bomb.yaml", bomb + "predicted_step_ms: 1\ndevices: *h\nops: *h\n", "not a valid plan"},
	}
	for _, b := range bad {
		path := write(b.name, []byte(b.data))
		_, err := plan.ReadFile(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), b.want) ||
			strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "plan.") {
			t.Errorf("%s: err = %v, want one line naming the file, saying %q and no Go type", b.name, err, b.want)
		}
	}
	missing := filepath.Join(dir, "missing.json")
	if _, err := plan.ReadFile(missing); err == nil || err.Error() != missing+": cannot read the plan: no such file or directory" {
		t.Errorf("missing file: err = %v", err)
	}
	if _, err := plan.ReadFile(dir); err == nil || !strings.Contains(err.Error(), dir+": cannot read the plan") {
		t.Errorf("directory: err = %v", err)
	}
}

// bomb is a YAML alias bomb: 9^8 strings once its aliases are expanded.
const bomb = `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
`
