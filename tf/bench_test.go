package tf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/internal/importopt"
)

// BenchmarkDecode measures a whole import (parse, shape inference,
// recovery of missing constant values, graph building) of each model.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"emotion.json", "emotion.pb", "blazeface.json", "blazeface.pb", "blazeface.pbtxt", "facemesh.json", "iris.json", "movenet-lightning.json"} {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "tf", name))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Decode(data, name, Options{Import: importopt.Options{Batch: 1}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
