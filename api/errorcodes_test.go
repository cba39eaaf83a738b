package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/getkin/kin-openapi/openapi3"
)

// statusNames resolves the net/http status names the api package uses
// (and more). A name missing here fails the test: add it.
var statusNames = map[string]int{
	"StatusBadRequest":            http.StatusBadRequest,
	"StatusUnauthorized":          http.StatusUnauthorized,
	"StatusForbidden":             http.StatusForbidden,
	"StatusNotFound":              http.StatusNotFound,
	"StatusMethodNotAllowed":      http.StatusMethodNotAllowed,
	"StatusConflict":              http.StatusConflict,
	"StatusRequestEntityTooLarge": http.StatusRequestEntityTooLarge,
	"StatusInsufficientStorage":   http.StatusInsufficientStorage,
	"StatusUnsupportedMediaType":  http.StatusUnsupportedMediaType,
	"StatusTooManyRequests":       http.StatusTooManyRequests,
	"StatusInternalServerError":   http.StatusInternalServerError,
	"StatusServiceUnavailable":    http.StatusServiceUnavailable,
	"StatusGatewayTimeout":        http.StatusGatewayTimeout,
}

// sentErrors reads the api package's source and returns every code and
// status pair an Error literal is built with ("code status" → where), and
// where a literal is built from variables (the sentinel table's loop).
func sentErrors(t *testing.T) (pairs map[string][]string, dynamic []string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	pairs = map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if id, ok := lit.Type.(*ast.Ident); !ok || id.Name != "Error" {
				return true
			}
			where := fset.Position(lit.Pos()).String()
			var status, code ast.Expr
			for i, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					switch kv.Key.(*ast.Ident).Name {
					case "Status":
						status = kv.Value
					case "Code":
						code = kv.Value
					}
					continue
				}
				switch i {
				case 0:
					status = e
				case 1:
					code = e
				}
			}
			s, sok := constStatus(status)
			c, cok := code.(*ast.BasicLit)
			if !sok || !cok || c.Kind != token.STRING {
				dynamic = append(dynamic, where)
				return true
			}
			cs, _ := strconv.Unquote(c.Value)
			key := cs + " " + strconv.Itoa(s)
			pairs[key] = append(pairs[key], where)
			return true
		})
	}
	return pairs, dynamic
}

func constStatus(e ast.Expr) (int, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		n, err := strconv.Atoi(e.Value)
		return n, err == nil
	case *ast.Ident:
		if e.Name == "statusClientClosedRequest" {
			return 499, true
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "http" {
			n, ok := statusNames[e.Sel.Name]
			return n, ok
		}
	}
	return 0, false
}

// TestErrorCodesAreOneTable: the codes and statuses the server sends, its
// table of them (errorCodes in errors.go) and the OpenAPI document's
// ErrorCode are the same list, exactly.
func TestErrorCodesAreOneTable(t *testing.T) {
	table, sentinels := api.ErrorCodesForTest()
	inTable := func(code string, status int) bool { return slices.Contains(table[code], status) }

	// What the source sends.
	pairs, dynamic := sentErrors(t)
	if len(dynamic) != 1 {
		t.Errorf("Error literals not built from a constant status and code: %v; want only the store refusals' mapping (errors.go)", dynamic)
	}
	for _, s := range sentinels {
		code, status := s[0].(string), s[1].(int)
		key := code + " " + strconv.Itoa(status)
		pairs[key] = append(pairs[key], "the store's refusal codes (db.Codes, mapped in errors.go)")
	}
	for key, where := range pairs {
		code, status, _ := strings.Cut(key, " ")
		n, _ := strconv.Atoi(status)
		if !inTable(code, n) {
			t.Errorf("%s sends %s %s, which the code table (errorCodes) does not list", where[0], code, status)
		}
	}
	for code, statuses := range table {
		for _, status := range statuses {
			if pairs[code+" "+strconv.Itoa(status)] == nil {
				t.Errorf("the code table lists %s %d, but nothing in the api package sends it", code, status)
			}
		}
	}

	// What the document says.
	doc := loadOpenAPI(t)
	ec := doc.Components.Schemas["ErrorCode"].Value
	var enum []string
	for _, v := range ec.Enum {
		enum = append(enum, v.(string))
	}
	slices.Sort(enum)
	if want := slices.Sorted(maps.Keys(table)); !slices.Equal(enum, want) {
		t.Errorf("document ErrorCode enum = %v, want the server's codes %v", enum, want)
	}
	docStatuses, _ := ec.Extensions["x-fenceq-statuses"].(map[string]any)
	if len(docStatuses) != len(table) {
		t.Errorf("document x-fenceq-statuses has %d codes, the server's table %d", len(docStatuses), len(table))
	}
	for code, statuses := range table {
		var got []int
		list, _ := docStatuses[code].([]any)
		for _, v := range list {
			f, _ := v.(float64)
			got = append(got, int(f))
		}
		if !slices.Equal(got, statuses) {
			t.Errorf("document x-fenceq-statuses[%s] = %v, want %v", code, got, statuses)
		}
	}

	// Every documented error reply names a code the table sends with
	// that status.
	for key, op := range operations(doc) {
		for status, ref := range op.Responses.Map() {
			n, err := strconv.Atoi(status)
			if err != nil || n < 400 {
				continue
			}
			media := ref.Value.Content.Get("application/json")
			if media == nil && slices.Contains(op.Tags, "pages") && ref.Value.Content.Get("text/plain") != nil {
				continue // the status page's own plain-text 404 (web), not the API's
			}
			if media == nil {
				t.Errorf("%s: the %s reply has no application/json body", key, status)
				continue
			}
			codes := errorReplyCodes(media.Schema.Value)
			if len(codes) == 0 {
				t.Errorf("%s: the %s reply does not name its error code", key, status)
			}
			for _, code := range codes {
				if !inTable(code, n) {
					t.Errorf("%s: the %s reply documents code %s, which the server does not send with %s", key, status, code, status)
				}
			}
		}
	}
}

// errorReplyCodes returns the codes an error reply's schema allows:
// error.code's enum, where the reply narrows the shared Error schema.
func errorReplyCodes(s *openapi3.Schema) []string {
	prop := func(s *openapi3.Schema, name string) *openapi3.Schema {
		if p := s.Properties[name]; p != nil {
			return p.Value
		}
		return nil
	}
	e := prop(s, "error")
	if e == nil {
		return nil
	}
	c := prop(e, "code")
	if c == nil {
		return nil
	}
	var out []string
	for _, v := range c.Enum {
		out = append(out, v.(string))
	}
	return out
}
