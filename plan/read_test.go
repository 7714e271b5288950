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
		{"cluster.yaml", "name: c\nhosts:\n  - name: h\n", "lists no devices"},
		{"garbage.yaml", "\x00\x01: [", "not a valid plan"},
		{"stray.json", `{"devices":[{"name":"a"}],"ops":[{"name":"x","device":"b"}]}`, `op "x" is placed on "b"`},
	}
	for _, b := range bad {
		path := write(b.name, []byte(b.data))
		_, err := plan.ReadFile(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err = %v, want one naming the file and saying %q", b.name, err, b.want)
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
