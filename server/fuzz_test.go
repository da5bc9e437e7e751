package server

import (
	"bindery/api"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Fuzz targets for the bodies the API binds (go test -fuzz; the seed corpus is committed under
// testdata/fuzz). Whatever the body, the answer is a documented status with a well-formed body
// that leaks nothing — never a panic, never a 500.

// fuzzHarness is shared by the iterations of one target: building a server per input would
// make the fuzzer crawl.
func fuzzHarness(t testing.TB) *harness {
	return setup(t, options{config: map[string]string{"ratelimit.apply": "<blank>"}})
}

func checkFuzzAnswer(t *testing.T, code int, body string, allowed ...int) {
	t.Helper()
	ok := false
	for _, a := range allowed {
		ok = ok || a == code
	}
	if !ok {
		t.Fatalf("status %d: %s", code, body)
	}
	if code >= 400 {
		var e api.ErrorBody
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code == "" {
			t.Fatalf("error body %q", body)
		}
		if m := leakPatterns.FindString(e.Message); m != "" {
			t.Fatalf("message leaks %q: %s", m, body)
		}
	}
}

func FuzzApplyBody(f *testing.F) {
	for _, seed := range []string{
		applyJSON("op-1", "public-a"), applyJSON("op-1", "restricted-b"), `{}`, `[]`, `null`, `{"operationId":1}`,
		`{"operationId":"op-1","targetKey":"public-a","reason":"r","extra":true}`, `{"operationId":"op-1","targetKey":"public-a","reason":"r"} {}`,
		`{"operationId":"` + strings.Repeat("a", 200) + `","targetKey":"public-a","reason":"r"}`, "\xff\xfe", `{"reason":"\u0000"}`,
	} {
		f.Add(seed)
	}
	h := fuzzHarness(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := h.doAs(t, call{method: "POST", path: "/api/apply", user: "alice", body: body, outside: true})
		checkFuzzAnswer(t, rec.Code, rec.Body.String(), 202, 400, 403, 409, 413, 422)
	})
}

func FuzzApprovalCallbackBody(f *testing.F) {
	for _, seed := range []string{
		`{"requestId":"cb-1","operationId":"op-1","result":"APPROVED","ext":{"mrId":"12"}}`, `{"requestId":"cb","operationId":"op-1","result":"withdrawn"}`,
		`{"requestId":"","operationId":"op-1","result":"APPROVED"}`, `{"ext":{"mrId":12}}`, `{"requestId":"cb","operationId":"<x>","result":"REJECTED"}`, `nope`, ``,
	} {
		f.Add(seed)
	}
	h := fuzzHarness(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := h.doAs(t, call{method: "POST", path: "/hooks/approval", body: body, header: signed("s3cret", body), ct: "application/json", outside: true})
		checkFuzzAnswer(t, rec.Code, rec.Body.String(), http.StatusOK, 400, 413)
	})
}

func FuzzDeployCallbackBody(f *testing.F) {
	for _, seed := range []string{
		`{"project":"infra/access-config","mrIid":12}`, `{"project":"p","mrIid":12,"operationIds":["op-1","op-2"]}`,
		`{"project":"p","mrIid":-1}`, `{"project":"p","mrIid":1e99}`, `{"operationIds":[1]}`, `{"project":null}`,
	} {
		f.Add(seed)
	}
	h := fuzzHarness(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := h.doAs(t, call{method: "POST", path: "/hooks/deploy", body: body, ct: "application/json", header: map[string]string{"Authorization": "Bearer dtok"}, outside: true})
		checkFuzzAnswer(t, rec.Code, rec.Body.String(), http.StatusOK, 400, 413)
	})
}

func FuzzGitLabEventBody(f *testing.F) {
	for _, seed := range []string{
		`{"object_kind":"pipeline","project":{"path_with_namespace":"p"},"object_attributes":{"id":9,"status":"failed"},"merge_request":{"iid":3}}`,
		`{"object_kind":"merge_request","project":{"path_with_namespace":"p"},"object_attributes":{"iid":3,"state":"merged","action":"merge"}}`,
		`{"object_kind":"merge_request","object_attributes":{"iid":"3"}}`, `{"object_kind":"push"}`, `{"object_kind":"pipeline","merge_request":null}`,
	} {
		f.Add(seed)
	}
	h := fuzzHarness(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := h.doAs(t, call{method: "POST", path: "/hooks/gitlab", body: body, ct: "application/json", header: map[string]string{"X-Gitlab-Token": "gtok"}, outside: true})
		checkFuzzAnswer(t, rec.Code, rec.Body.String(), http.StatusOK, 400, 413)
	})
}
