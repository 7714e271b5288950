package files

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// JSONError words an encoding/json error about data in one line, with
// the line and column it is at and without the Go types it names
// ("cannot unmarshal string into Go struct field DeviceType.peak_flops of
// type float64" becomes "peak_flops: expected a number, found a string
// (the value ending at line 4:18)").
func JSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("%s at line %s", strings.TrimPrefix(syn.Error(), "json: "), LineCol(data, syn.Offset-1))
	case errors.As(err, &typ):
		field := typ.Field
		switch top := bytes.TrimLeft(data, " \t\r\n\ufeff"); {
		case field == "" && len(top) > 0 && top[0] == '[' && typ.Value != "array":
			field = "an element of the list"
		case field == "":
			field = "the top level"
		}
		found := map[string]string{"string": "a string", "number": "a number", "object": "a map", "array": "a list", "bool": "true or false"}[typ.Value]
		if found == "" {
			found = typ.Value // "number 1e999", "number -1"
		}
		return fmt.Sprintf("%s: expected %s, found %s (the value ending at line %s)", field, GoTypeWord(typ.Type.String()), found, LineCol(data, typ.Offset-1))
	}
	msg, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "json: "), "\n")
	return msg
}

// GoTypeWord says in words what a value of the Go type named t is, for
// messages about a file that must not name Go types.
func GoTypeWord(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.Contains(t, "."):
		return "a map of fields"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "another kind of value"
}

// LineCol is the 1-based "line:column" of byte offset off of data.
func LineCol(data []byte, off int64) string {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("%d:%d", line, col)
}
