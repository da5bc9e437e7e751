package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"bindery/internal/vocab/state"
)

// apiClient calls bindery's HTTP API as the bench's people: each request carries an identity
// in the login header, which the generated configuration trusts from loopback.
type apiClient struct {
	base string
	hc   *http.Client
}

func newAPIClient(base string) *apiClient {
	return &apiClient{base: base, hc: &http.Client{Timeout: 10 * time.Second}}
}

// call sends method path as who with a JSON body (none when ""), and decodes a 2xx answer
// into into (when not nil); any other answer is an error that quotes it.
func (c *apiClient) call(ctx context.Context, method, path, who, body string, into any) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set(loginHeader, who)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	status, data, err := send(c.hc, req)
	switch {
	case err != nil:
		return err
	case status < 200 || status > 299:
		return fmt.Errorf("%s %s: %d %s", method, path, status, oneLine(string(data)))
	case into != nil:
		return json.Unmarshal(data, into)
	}
	return nil
}

// status is the request's binding status, asked by its owner.
func (c *apiClient) status(ctx context.Context, o owned) (state.BindingStatus, error) {
	var v struct {
		Status state.BindingStatus `json:"status"`
	}
	err := c.call(ctx, "GET", "/api/requests/"+o.id, o.identity, "", &v)
	return v.Status, err
}

// stuck lists the operationIds of the operator's stuck list in status, every page.
func (c *apiClient) stuck(ctx context.Context, status state.BindingStatus) ([]string, error) {
	var ids []string
	cursor := ""
	for {
		var page struct {
			Items []struct {
				OperationID string `json:"operationId"`
			} `json:"items"`
			NextCursor string `json:"nextCursor"`
		}
		q := "/api/ops/requests?limit=100&status=" + string(status)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		if err := c.call(ctx, "GET", q, opsIdentity, "", &page); err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			ids = append(ids, it.OperationID)
		}
		if cursor = page.NextCursor; cursor == "" {
			return ids, nil
		}
	}
}
