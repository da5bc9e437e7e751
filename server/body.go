package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"bindery/internal/vocab/apperr"
)

// readBody reads the whole body once, bounded by limit (413 beyond it), and keeps it for the
// handler. It runs after authentication, except for the approval hook whose authentication is a
// signature over the body.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) error {
	info := infoOf(r)
	if info.read {
		return nil
	}
	tooLarge := apperr.New(apperr.BodyTooLarge, "The request body is larger than %d KiB.", limit>>10)
	if r.ContentLength > limit {
		return tooLarge
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return tooLarge
		}
		return apperr.Wrap(err, apperr.InvalidArgument, "The request body could not be read.")
	}
	info.body, info.read = data, true
	return nil
}

// requireJSON refuses a non-empty body that is not declared JSON (415).
func requireJSON(r *http.Request) error {
	if len(infoOf(r).body) == 0 && r.Header.Get("Content-Type") == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return apperr.New(apperr.UnsupportedMedia, "The request body must be JSON (Content-Type: application/json).")
	}
	// JSON is UTF-8 (RFC 8259); a body declared otherwise would be misread, not converted.
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return apperr.New(apperr.UnsupportedMedia, "The request body must be UTF-8 JSON (charset=%s is not read).", cs)
	}
	return nil
}

// bindJSON decodes the request body into v. strict refuses unknown fields (our own API: a typo
// such as "target_key" must not be silently ignored); webhooks are lenient (senders add fields).
// Every error is a 400 that names the field, in our words — never the decoder's, which would
// show Go type names.
func bindJSON(r *http.Request, v any, strict bool) error {
	data := infoOf(r).body
	if len(bytes.TrimSpace(data)) == 0 {
		return apperr.Invalid("body", "a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return apperr.Invalid("body", "unexpected data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return apperr.Invalid("body", "unexpected data after the JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return apperr.Invalid("body", "must be a JSON object")
		}
		return apperr.Invalid(fieldName(te.Field), "must be %s", jsonKind(te.Type))
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
		return apperr.Invalid("body", "is not valid JSON")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return apperr.Invalid(fieldName(strings.Trim(name, `"`)), "is not a known field")
	}
	return apperr.Invalid("body", "is not valid JSON")
}

// fieldName keeps a client-supplied field name short and printable before it is echoed.
func fieldName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 64 {
			break
		}
		if r > 0x20 && r < 0x7f && r != '"' && r != '\\' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func jsonKind(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "of another type"
}

// operationIDPattern: client-generated ids (the SPA sends UUIDs); bounded so they fit the key
// columns (operation_id is VARCHAR(64): a longer id passed here and failed the insert on MySQL
// in strict mode with a 500) and never carry markup.
var operationIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// checkOperationID validates an operationId found in field.
func checkOperationID(field, id string) error {
	switch {
	case id == "":
		return apperr.Invalid(field, "is required (a client-generated id, e.g. a UUID)")
	case !operationIDPattern.MatchString(id):
		return apperr.Invalid(field, "must be 1 to 64 letters, digits or . _ : -, starting with a letter or digit")
	}
	return nil
}

// pageQuery reads ?cursor=&limit= (limit default 20, 1..100).
func pageQuery(r *http.Request) (cursor string, limit int, err error) {
	q := r.URL.Query()
	cursor = q.Get("cursor")
	if len(cursor) > 256 || strings.ContainsFunc(cursor, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		return "", 0, apperr.Invalid("cursor", "is not a cursor this API returned")
	}
	limit = 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return "", 0, apperr.Invalid("limit", "must be an integer from 1 to 100")
		}
		limit = n
	}
	return cursor, limit, nil
}
