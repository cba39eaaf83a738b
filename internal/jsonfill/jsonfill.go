// Package jsonfill fills values of any struct type at random for the tests
// that hold go-json to encoding/json (api's reply encoder, api/client's
// answer decoder).
package jsonfill

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Check runs check as a subtest per type of protos, each with a rapid
// property over pointers to random values of that type (Fill).
func Check(t *testing.T, protos []any, check func(t *rapid.T, v any)) {
	for _, proto := range protos {
		typ := reflect.TypeOf(proto)
		t.Run(typ.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				v := reflect.New(typ)
				Fill(t, v.Elem())
				check(t, v.Interface())
			})
		})
	}
}

var (
	rawMessageType = reflect.TypeOf(json.RawMessage(nil))
	timeType       = reflect.TypeOf(time.Time{})
)

// Fill sets every exported field of v, recursively, to a random value:
// strings with HTML characters, control characters, U+2028 and invalid
// UTF-8; json.RawMessage a valid JSON text with whitespace around and
// inside; times zero or between 1970 and 2200 in UTC (as the store keeps
// them); nil, empty and full lists and maps; nil and set pointers.
func Fill(t *rapid.T, v reflect.Value) { fill(t, v, 0) }

func fill(t *rapid.T, v reflect.Value, depth int) {
	switch {
	case v.Type() == rawMessageType:
		if rapid.Bool().Draw(t, "raw-nil") {
			return
		}
		v.SetBytes(rawJSON(t, depth))
		return
	case v.Type() == timeType:
		if rapid.Bool().Draw(t, "zero-time") {
			return
		}
		ns := rapid.Int64Range(0, 7258118400e9).Draw(t, "ns") // 1970..2200, as the store keeps them
		v.Set(reflect.ValueOf(time.Unix(0, ns).UTC()))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(trickyString(t))
	case reflect.Bool:
		v.SetBool(rapid.Bool().Draw(t, "bool"))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(rapid.Int64().Draw(t, "int") >> (64 - v.Type().Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(rapid.Uint64().Draw(t, "uint") >> (64 - v.Type().Bits()))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(rapid.Float64Range(-1e12, 1e12).Draw(t, "float"))
	case reflect.Pointer:
		if depth > 3 || rapid.Bool().Draw(t, "nil-pointer") {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		switch n := rapid.IntRange(-1, 3).Draw(t, "len"); {
		case n < 0 || depth > 3: // nil
		default:
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := range n {
				fill(t, s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		if rapid.Bool().Draw(t, "nil-map") {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range rapid.IntRange(0, 4).Draw(t, "entries") {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, depth+1)
			fill(t, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		if rapid.Bool().Draw(t, "nil-interface") {
			return
		}
		v.Set(reflect.ValueOf(trickyString(t)))
	default:
		panic(fmt.Sprintf("fill: no generator for %s", v.Type()))
	}
}

// trickyString draws strings that JSON encoders must escape with care.
func trickyString(t *rapid.T) string {
	return rapid.OneOf(
		rapid.String(),
		rapid.SampledFrom([]string{"", "<script>&amp;</script>", "a\u2028b\u2029c", "\x00\x1f\x7f", "\xff\xfe invalid", "é\u00e9\U0001F600", `"\/\\`}),
		rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }),
	).Draw(t, "string")
}

// rawJSON draws a valid JSON text with random whitespace, as a caller may
// send a payload or a result.
func rawJSON(t *rapid.T, depth int) []byte {
	var v any
	switch k := rapid.IntRange(0, 6).Draw(t, "json-kind"); {
	case k == 0:
		v = nil
	case k == 1:
		v = rapid.Bool().Draw(t, "json-bool")
	case k == 2:
		v = rapid.Float64Range(-1e9, 1e9).Draw(t, "json-number")
	case k == 3:
		v = trickyString(t)
	case k == 4 && depth < 6:
		m := map[string]any{}
		for range rapid.IntRange(0, 3).Draw(t, "json-keys") {
			m[trickyString(t)] = json.RawMessage(rawJSON(t, depth+2))
		}
		v = m
	default:
		var l []any
		for range rapid.IntRange(0, 3).Draw(t, "json-items") {
			l = append(l, json.RawMessage(rawJSON(t, depth+2)))
		}
		v = l
	}
	var b []byte
	var err error
	if rapid.Bool().Draw(t, "indented") {
		b, err = json.MarshalIndent(v, " ", "\t")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		panic(err)
	}
	return append(append([]byte(" \n"), b...), '\t')
}
