package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// The OpenAPI document is a contract the API tests hold the server to: every request a test
// sends through the harness and every answer it gets are checked against the document with
// kin-openapi, a validator we did not write. A drift either way fails the test that made the
// request:
//   - an answer that the document does not describe (status, Content-Type, body, Retry-After);
//   - a request the document refuses that the server accepted (the document is too strict);
//   - a request the document allows that the server refused as invalid (400, 415): the document
//     misses a constraint the server enforces.

// contractDoc is the served document, loaded and validated once for the package's tests.
var contractDoc = sync.OnceValues(func() (*openapi3.T, error) {
	// The sign-in's navigations answer pages; their text is a string to the document.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
	// The audit export's rows: a stream whose lines are AuditRecords (its own test reads them).
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.FileBodyDecoder)
	doc, err := openapi3.NewLoader().LoadFromData(openAPIDoc)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return doc, nil
})

var contractRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := contractDoc()
	if err != nil {
		return nil, err
	}
	return gorillamux.NewRouter(doc)
})

// requestOptions: the request is checked as the client sent it (no defaults filled in), and a
// security requirement is met when its credentials are present — whether they are right is the
// server's business (401), not the document's.
var requestOptions = &openapi3filter.Options{SkipSettingDefaults: true, AuthenticationFunc: credentialsPresent}

// responseOptions: a status the operation does not document is a drift too.
var responseOptions = &openapi3filter.Options{IncludeResponseStatus: true}

func credentialsPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r, s := in.RequestValidationInput.Request, in.SecurityScheme
	present := false
	switch {
	case s.Type == "http" && s.Scheme == "bearer":
		present = strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ")
	case s.Type == "apiKey" && s.In == "header":
		present = r.Header.Get(s.Name) != ""
	case s.Type == "apiKey" && s.In == "cookie":
		_, err := r.Cookie(s.Name)
		present = err == nil
	}
	if !present {
		return in.NewError(errors.New("credentials absent"))
	}
	return nil
}

// exchange is one request and its answer, as a test saw them.
type exchange struct {
	req    *http.Request // its body, if any, is body
	body   []byte
	status int
	header http.Header
	answer []byte
	// outside: the request is deliberately outside the document (fuzz input, hostile bodies,
	// a lenient spelling), so the server may accept what the document does not describe; its
	// answer is still checked, and so is the server's refusal of what the document allows.
	outside bool
}

// checkContract holds one exchange to the document (see the comment at the top of the file).
// Requests to paths the document does not describe (the page, assets, unknown paths) are not
// the API's; TestOpenAPIDocumentsEveryRoute keeps the document's paths and the route table equal.
// It reports whether the document allows the request.
func checkContract(t testing.TB, x exchange) (allowed bool) {
	t.Helper()
	router, err := contractRouter()
	if err != nil {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	route, params, err := router.FindRoute(x.req)
	if err != nil {
		return false
	}
	what := fmt.Sprintf("%s %s → %d", x.req.Method, x.req.URL.RequestURI(), x.status)
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{Request: x.req, PathParams: params, Route: route, Options: requestOptions}
	x.req.Body = io.NopCloser(bytes.NewReader(x.body))
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	if reqErr == nil && len(x.body) > 0 && !json.Valid(x.body) {
		// kin-openapi reads the first JSON value of a body and ignores what follows; a body
		// that is not one JSON value is no request the document describes.
		reqErr = errors.New("the body is not one JSON value")
	}

	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: x.status, Header: x.header, Options: responseOptions}
	out.SetBodyBytes(x.answer)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: the answer is not the documented one: %v\n%.300s", what, err, x.answer)
	}
	switch {
	case reqErr != nil && x.status < 400 && !x.outside:
		t.Errorf("%s: the server accepted a request the document refuses: %v", what, reqErr)
	case reqErr == nil && (x.status == http.StatusBadRequest || x.status == http.StatusUnsupportedMediaType) && !outsideTheSchema(x.answer) && !beyondTheDocument(x.body):
		t.Errorf("%s: the document allows this request, but the server refused it: %.300s", what, x.answer)
	}
	return reqErr == nil
}

// outsideTheSchema is a refusal the document describes in words, because it depends on state
// a schema cannot know: a target key that is not in the catalog in force, a cursor this API did
// not issue (cursors are opaque), an export range whose end is not after its start.
// beyondTheDocument reports whether a JSON body is read differently by Go's decoder and by the
// document, so that what the document allows says nothing about what the server reads: a
// property of the document named in another letter case ("oBjeCt_kind": Go reads it as that
// property, the case-sensitive document as an unknown one), or a whole number spelt with an
// exponent or a fraction ("1e0", "5.0": an integer to the document, not to Go's int fields).
func beyondTheDocument(body []byte) bool {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return false
	}
	exact, lower := documentProperties()
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if !exact[k] && lower[strings.ToLower(k)] || walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case json.Number:
			return strings.ContainsAny(string(x), ".eE")
		}
		return false
	}
	return walk(v)
}

// documentProperties is every property name of the document's schemas, as written and
// lower-cased.
var documentProperties = sync.OnceValues(func() (exact, lower map[string]bool) {
	exact, lower = map[string]bool{}, map[string]bool{}
	doc, err := contractDoc()
	if err != nil {
		return exact, lower
	}
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(r *openapi3.SchemaRef) {
		if r == nil || r.Value == nil || seen[r.Value] {
			return
		}
		s := r.Value
		seen[s] = true
		for k, p := range s.Properties {
			exact[k], lower[strings.ToLower(k)] = true, true
			walk(p)
		}
		walk(s.Items)
		for _, list := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
			for _, e := range list {
				walk(e)
			}
		}
	}
	for _, r := range doc.Components.Schemas {
		walk(r)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for _, mt := range op.RequestBody.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
	return exact, lower
})

func outsideTheSchema(answer []byte) bool {
	// The sign-in's refusals depend on the browser's state (its state cookie, a sign-in taken
	// already) and on what a path means, which a document cannot describe.
	if bytes.Contains(answer, []byte(`id="signin-problem"`)) {
		return true
	}
	var e api.ErrorBody
	if json.Unmarshal(answer, &e) != nil {
		return false
	}
	return (e.Field == "targetKey" && strings.Contains(e.Message, "not in the catalog")) || e.Field == "cursor" ||
		(e.Field == "to" && strings.Contains(e.Message, "after from"))
}

// contractClient is an HTTP client whose answers are checked against the document, for the
// tests that talk to a real listener. Their requests are hostile by design (endless uploads,
// lying lengths): their answers are checked, and a body-less request the document allows must
// not be refused.
func contractClient(t testing.TB) *http.Client {
	return &http.Client{Transport: contractTransport{t}}
}

type contractTransport struct{ t testing.TB }

func (c contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	probe := req.Clone(context.Background())
	if req.Body != nil && req.Body != http.NoBody {
		// The body went to the server and is not read again (it may be endless).
		checkAnswerOnly(c.t, probe, resp.StatusCode, resp.Header, answer)
	} else {
		checkContract(c.t, exchange{req: probe, status: resp.StatusCode, header: resp.Header, answer: answer, outside: true})
	}
	return resp, nil
}

// checkAnswerOnly holds an answer to the document without looking at its request.
func checkAnswerOnly(t testing.TB, req *http.Request, status int, header http.Header, answer []byte) {
	t.Helper()
	router, err := contractRouter()
	if err != nil {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: requestOptions}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: responseOptions}
	out.SetBodyBytes(answer)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s → %d: the answer is not the documented one: %v\n%.300s", req.Method, req.URL.RequestURI(), status, err, answer)
	}
}

// The document is valid OpenAPI by kin-openapi's loader and validator, and it is a contract a
// client can rely on: every operation has an operationId and declares its security.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	if doc.Info.License == nil || doc.Info.License.Name == "" {
		t.Error("info.license is missing")
	}
	if len(doc.Servers) == 0 {
		t.Error("no servers")
	}
	ops := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops++
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId", method, path)
			}
			if op.Security == nil {
				t.Errorf("%s %s declares no security (security: [] when it needs none)", method, path)
			}
		}
	}
	if ops < 20 {
		t.Fatalf("only %d operations", ops)
	}
}

// The document's enums are the server's own lists: a status or step added to the store is
// added to the document, or this fails.
func TestOpenAPIEnumsAreTheServersLists(t *testing.T) {
	t.Parallel()
	doc, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	enum := func(name string) []string {
		var out []string
		for _, v := range doc.Components.Schemas[name].Value.Enum {
			out = append(out, fmt.Sprint(v))
		}
		sort.Strings(out)
		return out
	}
	var statuses, batchStatuses, steps []string
	for _, s := range state.AllStatuses {
		statuses = append(statuses, string(s))
	}
	for _, s := range []state.BatchStatus{state.BatchRunning, state.BatchBlocked, state.BatchSucceeded, state.BatchFailed} {
		if !s.Known() {
			t.Fatalf("%s is not a batch status", s)
		}
		batchStatuses = append(batchStatuses, string(s))
	}
	for code := state.Step(0); code < 100_000; code++ {
		if code.Known() {
			steps = append(steps, fmt.Sprint(int(code)))
		}
	}
	var events []string
	for _, e := range state.EventTypes() {
		if e.Public() {
			events = append(events, string(e))
		}
	}
	for _, c := range []struct {
		schema string
		want   []string
	}{{"BindingStatus", statuses}, {"BatchStatus", batchStatuses}, {"StepCode", steps}, {"RoundOutcome", slices.Clone(api.RoundOutcomes)}, {"EventType", events}} {
		sort.Strings(c.want)
		if got := enum(c.schema); !slices.Equal(got, c.want) {
			t.Errorf("%s: the document lists %v, the server %v", c.schema, got, c.want)
		}
	}
}
