// Command sdkgen writes the low-level layer of the Python client
// (clients/python/fenceq/_models.py) from the OpenAPI document
// (api/openapi.json, read with kin-openapi): one TypedDict per object
// schema, a Literal per string enum, and the table of operations (method
// and path by operationId). The hand-written Client and Worker use these
// types. Run it from the repository root after changing the document:
//
//	go run ./internal/sdkgen
//
// TestGeneratedPythonModelsAreCurrent fails when the file on disk is not
// what this program writes (CI's drift check).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/fenceq/fenceq/api"
	"github.com/getkin/kin-openapi/openapi3"
)

// pythonModels is the generated file, relative to the repository root.
const pythonModels = "clients/python/fenceq/_models.py"

func main() {
	out := flag.String("o", pythonModels, "file to write")
	flag.Parse()
	src, err := generatePython(api.OpenAPIDocument())
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdkgen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "sdkgen:", err)
		os.Exit(1)
	}
}

// gen collects the classes and aliases of one file.
type gen struct {
	doc   *openapi3.T
	defs  map[string]string // name -> definition text
	bases map[string]string // class name -> its base class (TypedDict or a class of the file)
	order []string
}

// emitOrder is the order the definitions are written in: aliases first,
// then each class after its base (Python evaluates base classes at once).
func (g *gen) emitOrder() []string {
	names := append([]string(nil), g.order...)
	sort.Strings(names)
	var out []string
	done := map[string]bool{}
	for _, n := range names {
		if _, isClass := g.bases[n]; !isClass {
			out = append(out, n)
			done[n] = true
		}
	}
	for len(out) < len(names) {
		for _, n := range names {
			if base := g.bases[n]; !done[n] && (base == "TypedDict" || done[base]) {
				out = append(out, n)
				done[n] = true
			}
		}
	}
	return out
}

func (g *gen) add(name, text string) {
	if _, ok := g.defs[name]; ok {
		return
	}
	g.defs[name] = text
	g.order = append(g.order, name)
}

func generatePython(document []byte) ([]byte, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("loading the OpenAPI document: %w", err)
	}
	g := &gen{doc: doc, defs: map[string]string{}, bases: map[string]string{}}
	names := make([]string, 0, len(doc.Components.Schemas))
	for name := range doc.Components.Schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		g.schema(name, doc.Components.Schemas[name].Value)
	}

	var b bytes.Buffer
	b.WriteString(`"""Types of the fenceq HTTP API, generated from api/openapi.json.

Do not edit: run ` + "`go run ./internal/sdkgen`" + ` from the repository root.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

__all__ = [
`)
	sort.Strings(g.order)
	for _, name := range g.order {
		fmt.Fprintf(&b, "    %q,\n", name)
	}
	b.WriteString("    \"OPERATIONS\",\n]\n")
	for _, name := range g.emitOrder() {
		b.WriteString("\n\n")
		b.WriteString(g.defs[name])
	}

	b.WriteString("\n\n# The API's operations: operationId -> (method, path).\nOPERATIONS: dict[str, tuple[str, str]] = {\n")
	type op struct{ id, method, path string }
	var ops []op
	for path, item := range doc.Paths.Map() {
		for method, o := range item.Operations() {
			if o.OperationID != "" {
				ops = append(ops, op{o.OperationID, method, path})
			}
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].id < ops[j].id })
	for _, o := range ops {
		fmt.Fprintf(&b, "    %q: (%q, %q),\n", o.id, o.method, o.path)
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// schema defines name for s when s is an object or a string enum, and
// returns the Python type of s.
func (g *gen) schema(name string, s *openapi3.Schema) string {
	switch {
	case len(s.Properties) > 0:
		g.object(name, s)
		return name
	case s.Type.Is("string") && len(s.Enum) > 0:
		vals := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			vals[i] = fmt.Sprintf("%q", v)
		}
		g.add(name, fmt.Sprintf("%s = Literal[%s]\n", name, strings.Join(vals, ", ")))
		return name
	}
	t := g.typeOf(name, s)
	if _, isComponent := g.doc.Components.Schemas[name]; isComponent {
		g.add(name, fmt.Sprintf("%s = %s\n", name, t))
		return name
	}
	return t
}

func (g *gen) object(name string, s *openapi3.Schema) {
	base := "TypedDict"
	// allOf of one reference plus properties: the reference's fields and more.
	if len(s.AllOf) == 1 && s.AllOf[0].Ref != "" {
		base = refName(s.AllOf[0].Ref)
	}
	var b strings.Builder
	g.bases[name] = base
	fmt.Fprintf(&b, "class %s(%s, total=False):\n", name, base)
	if d := firstLine(s.Description); d != "" {
		fmt.Fprintf(&b, "    %q\n\n", d)
	}
	props := make([]string, 0, len(s.Properties))
	for p := range s.Properties {
		props = append(props, p)
	}
	sort.Strings(props)
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	for _, p := range props {
		t := g.ref(name+camel(p), s.Properties[p])
		if required[p] {
			t = "Required[" + t + "]"
		} else {
			t = "NotRequired[" + t + "]"
		}
		fmt.Fprintf(&b, "    %s: %s\n", p, t)
	}
	g.add(name, b.String())
}

// ref returns the Python type of a schema reference; an inline object is
// defined under the name hint.
func (g *gen) ref(hint string, r *openapi3.SchemaRef) string {
	if r == nil {
		return "Any"
	}
	if r.Ref != "" {
		return refName(r.Ref)
	}
	return g.schema(hint, r.Value)
}

func (g *gen) typeOf(hint string, s *openapi3.Schema) string {
	if len(s.AllOf) == 1 && len(s.Properties) == 0 {
		return g.ref(hint, s.AllOf[0])
	}
	if alts := append(append([]*openapi3.SchemaRef{}, s.AnyOf...), s.OneOf...); len(alts) > 0 && s.Type.IsEmpty() {
		var ts []string
		for i, a := range alts {
			ts = append(ts, g.ref(fmt.Sprintf("%s%d", hint, i), a))
		}
		return strings.Join(ts, " | ")
	}
	if s.Const != nil {
		return fmt.Sprintf("Literal[%s]", pyLiteral(s.Const))
	}
	var ts []string
	for _, t := range s.Type.Slice() {
		switch t {
		case "integer":
			ts = append(ts, "int")
		case "number":
			ts = append(ts, "float")
		case "string":
			ts = append(ts, "str")
		case "boolean":
			ts = append(ts, "bool")
		case "null":
			ts = append(ts, "None")
		case "array":
			ts = append(ts, "list["+g.ref(hint+"Item", s.Items)+"]")
		case "object":
			ts = append(ts, "dict[str, Any]")
		}
	}
	if len(ts) == 0 {
		return "Any" // any JSON value
	}
	return strings.Join(ts, " | ")
}

func pyLiteral(v any) string {
	switch v := v.(type) {
	case bool:
		if v {
			return "True"
		}
		return "False"
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}

func refName(ref string) string { return ref[strings.LastIndex(ref, "/")+1:] }

func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	s, _, _ = strings.Cut(s, ". ")
	return strings.TrimSuffix(strings.TrimSpace(s), ".")
}
