package constraint

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that every failure is a
// complete *FileError, and that every rule it reads has a Source in the
// file and spells back to itself through String and ParseFlag. Run it
// with
//
//	go test ./constraint -run '^$' -fuzz FuzzParse -fuzztime 1m
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	for _, tt := range errorCases {
		f.Add([]byte(tt.src))
	}
	if doc, err := os.ReadFile(docsFile); err == nil {
		for _, block := range yamlBlocks(string(doc)) {
			f.Add([]byte(block.text))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("f.yaml", data)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || fe.File != "f.yaml" || fe.Msg == "" || fe.Line < 0 {
				t.Fatalf("error %q (%T) is not a complete *FileError", err, err)
			}
			return
		}
		if len(set.Rules) == 0 {
			t.Fatal("Parse returned no rules and no error")
		}
		for _, r := range set.Rules {
			if !strings.HasPrefix(r.Source, "f.yaml:") {
				t.Errorf("rule %v has Source %q", r, r.Source)
			}
			roundTrip(t, r)
		}
	})
}
