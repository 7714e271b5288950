package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that Parse never panics, that every failure is a
// *FileError, and that every success is a valid cluster whose paths all
// resolve. Run it with
//
//	go test ./cluster -run '^$' -fuzz FuzzParse -fuzztime 1m
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(testdata, "*.yaml"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tt := range errorCases {
		f.Add([]byte(tt.src))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "f.yaml")
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || fe.File != "f.yaml" || fe.Msg == "" {
				t.Fatalf("error %q (%T) is not a complete *FileError", err, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse returned an invalid cluster: %v", err)
		}
		n := min(len(c.Devices), 16)
		for a := 0; a < n; a++ {
			for b := 0; b < n; b++ {
				if tt := c.TransferTime(a, b, 1<<20); tt < 0 || tt != tt {
					t.Fatalf("TransferTime(%d, %d) = %v", a, b, tt)
				}
			}
		}
	})
}
