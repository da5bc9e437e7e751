package outbound

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxAnswer bounds how much of an answer is read; a system that streams more is broken.
const maxAnswer = 1 << 20

// Request is one JSON call to an external system.
type Request struct {
	System, Endpoint string
	Method, URL      string
	Header           http.Header // extra headers (credentials); may be nil
	Body             any         // sent as JSON; nil: no body
}

// DoJSON sends r and returns the status and the answer's body (at most 1 MiB). It is meant to
// run inside Guard.Call. A 2xx answer is decoded into out (may be nil); an answer outside 2xx is
// an *Error whose upstream text (log only) is the body, which is also returned for callers that
// read structured error answers. A 304 has no body and is reported like any other refusal.
func DoJSON(ctx context.Context, hc *http.Client, r Request, out any) (int, []byte, error) {
	var body io.Reader
	if r.Body != nil {
		data, err := json.Marshal(r.Body)
		if err != nil {
			return 0, nil, fmt.Errorf("encode %s %s: %w", r.System, r.Endpoint, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, body)
	if err != nil {
		return 0, nil, NewError(r.System, r.Endpoint, KindNotConfigured, err)
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, nil, err // the answer broke off: no answer, as far as the caller knows
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, data, NewStatusError(r.System, r.Endpoint, resp.StatusCode, "", string(data), nil).WithRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, data, NewStatusError(r.System, r.Endpoint, resp.StatusCode, "malformed_answer", string(data), err)
		}
	}
	return resp.StatusCode, data, nil
}
