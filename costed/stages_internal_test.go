package costed

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkStages splits the import of a costed graph named by
// OPPLACE_COSTED_FILE into parse, check and build, to see where it goes.
func BenchmarkStages(b *testing.B) {
	path := os.Getenv("OPPLACE_COSTED_FILE")
	if path == "" {
		b.Skip("OPPLACE_COSTED_FILE not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if _, err := parseV1(bytes.NewReader(data), path); err != nil {
				b.Fatal(err)
			}
		}
	})
	f, _ := parseV1(bytes.NewReader(data), path)
	b.Run("check", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if _, err := f.check(path); err != nil {
				b.Fatal(err)
			}
		}
	})
	e, _ := f.check(path)
	b.Run("build", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if _, err := buildV1(f, e, path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
