package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// readBody reads the whole (size-limited) request body.
func readBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &Error{http.StatusRequestEntityTooLarge, "resource_exhausted",
				fmt.Sprintf("request body is larger than the server's limit of %d bytes", mbe.Limit)}
		}
		return nil, invalidArgument("reading request body: %v", err)
	}
	return b, nil
}

// bindJSON reads the request body and decodes it into v (see decodeJSON);
// an empty body is invalid_argument.
func bindJSON(c echo.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeJSON(body, v, false)
}

// decodeJSON decodes body into v. Unknown fields are ignored so that old and
// new clients interoperate; a field of the wrong type is invalid_argument
// naming the field. An empty body decodes as {} when optional is set.
func decodeJSON(body []byte, v any, optional bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return invalidArgument("request body is empty; expected a JSON object")
	}
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		// encoding/json decodes null into a struct as "nothing to set":
		// without this, null would be the empty object (an enqueue into
		// "default"), which the API document does not allow.
		return invalidArgument("request body must be a JSON object, got null")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return invalidArgument("malformed JSON: unexpected data after the JSON value")
	}
	return nil
}

// decodeJSONList decodes body, a JSON list, item by item, refusing it as
// soon as it holds more than limit items: a small body of many tiny items
// must not be decoded (or committed) whole before it is refused.
func decodeJSONList[T any](body []byte, limit int, what string) ([]T, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil {
		return nil, jsonError(err)
	} else if tok != json.Delim('[') {
		return nil, invalidArgument("request body must be a JSON list")
	}
	var items []T
	for dec.More() {
		if len(items) == limit {
			return nil, invalidArgument("more than %d %s in one request; send at most %d", limit, what, limit)
		}
		var item *T // nil after a null, which must not read as {}
		if err := dec.Decode(&item); err != nil {
			return nil, jsonError(err)
		}
		if item == nil {
			return nil, invalidArgument("%s[%d] must be a JSON object, got null", what, len(items))
		}
		items = append(items, *item)
	}
	if _, err := dec.Token(); err != nil { // the closing ]
		return nil, jsonError(err)
	}
	if dec.More() {
		return nil, invalidArgument("malformed JSON: unexpected data after the JSON value")
	}
	return items, nil
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return invalidArgument("request body must be a JSON %s, got %s", jsonKind(te.Type.Kind().String()), te.Value)
		}
		return invalidArgument("field %q must be %s, got %s", te.Field, jsonKind(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return invalidArgument("malformed JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidArgument("malformed JSON: unexpected end of body")
	}
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return invalidArgument("malformed JSON: %v", err)
}

// jsonKind names a Go type as a JSON user would.
func jsonKind(goType string) string {
	switch goType {
	case "uint64":
		return "a non-negative integer"
	case "int64", "int":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "[]string":
		return "a list of strings"
	case "struct":
		return "object"
	case "slice":
		return "list"
	}
	return "a " + goType
}

// msDuration converts a millisecond field to a duration, refusing values
// that would overflow.
func msDuration(field string, ms int64) (time.Duration, error) {
	if ms < 0 {
		return 0, invalidArgument("%s must not be negative, got %d", field, ms)
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, invalidArgument("%s is absurdly large: %d", field, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// queryUint reads a non-negative integer query parameter into dst; an
// absent parameter leaves dst as it is.
func queryUint(c echo.Context, name string, dst *uint64) error {
	v := c.QueryParam(name)
	if v == "" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return invalidArgument("%s %q is not a non-negative integer", name, v)
	}
	*dst = n
	return nil
}

// queryInt reads an integer query parameter into dst; an absent parameter
// leaves dst as it is. Range checks belong to the store.
func queryInt(c echo.Context, name string, dst *int) error {
	v := c.QueryParam(name)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return invalidArgument("%s %q is not an integer", name, v)
	}
	*dst = n
	return nil
}

func pathID(c echo.Context) (uint64, error) {
	raw := c.Param("id")
	id, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || id == 0 {
		return 0, invalidArgument("job id %q is not a positive integer", raw)
	}
	return id, nil
}
