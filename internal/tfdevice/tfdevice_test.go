package tfdevice

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
)

func loadCluster(t *testing.T, name string) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Load(filepath.Join("..", "..", "testdata", "clusters", name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct {
		cluster, tmpl string
		want          map[string]string
	}{
		{"8xA100-2host.yaml", "", map[string]string{
			"n0gpu0": "/job:worker/replica:0/task:0/device:GPU:0",
			"n1gpu2": "/job:worker/replica:0/task:1/device:GPU:2",
		}},
		// hetero: v100a, v100b, t4, a100 are GPUs 0-3 of host 0, cpu0 its CPU 0.
		{"hetero.yaml", "", map[string]string{
			"v100a": "/job:worker/replica:0/task:0/device:GPU:0",
			"a100":  "/job:worker/replica:0/task:0/device:GPU:3",
			"cpu0":  "/job:worker/replica:0/task:0/device:CPU:0",
		}},
		{"4xV100.yaml", "/job:{host}/device:{kind}:{index}", map[string]string{"gpu3": "/job:node0/device:GPU:3"}},
	} {
		c := loadCluster(t, tc.cluster)
		strs, err := Strings(c, tc.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for i, d := range c.Devices {
			got[d.Name] = strs[i]
		}
		for dev, want := range tc.want {
			if got[dev] != want {
				t.Errorf("%s %q: %s is %q, want %q", tc.cluster, tc.tmpl, dev, got[dev], want)
			}
		}
	}
	c := loadCluster(t, "8xA100-2host.yaml")
	for tmpl, msg := range map[string]string{
		"/device:GPU:{index}":     "the same string",
		"/device:GPU:0":           "must contain {index} or {name}",
		"/task:{tsk}/gpu:{index}": "unknown placeholder",
	} {
		if _, err := Strings(c, tmpl); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("template %q: error %v, want %q", tmpl, err, msg)
		}
	}
}

func TestPinResolver(t *testing.T) {
	c := loadCluster(t, "8xA100-2host.yaml")
	r, err := NewPinResolver(c, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ spec, want, err string }{
		{"/job:worker/replica:0/task:1/device:GPU:2", "n1gpu2", ""},
		{"/job:worker/task:1/device:GPU:0", "n1gpu0", ""},
		{"/device:GPU:3", "n0gpu3", ""},
		{"/gpu:1", "n0gpu1", ""},
		{"n1gpu3", "n1gpu3", ""},
		{"/job:worker/task:1", "", ""},
		{"/device:GPU:*", "", ""},
		{"/device:CPU:0", "", "0 CPU devices on host 0"},
		{"/job:worker/task:5/device:GPU:0", "", "task 5 names no host"},
		{"/device:GPU:7", "", "none with index 7"},
		{"gpu zero", "", "not a TensorFlow device spec"},
	} {
		got, err := r(tc.spec)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.spec, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v; want %q", tc.spec, got, err, tc.want)
		}
	}
}
