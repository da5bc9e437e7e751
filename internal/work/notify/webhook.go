package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"bindery/internal/platform/config"
	"bindery/store"
)

// Standard Webhooks v1: the three headers, the signature over "id.timestamp.body".
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Sign is the webhook-signature header of one delivery: "v1,<base64 HMAC-SHA256>" for each
// secret (several while a secret is rotated), separated by spaces. A secret that is not
// whsec_ and base64 (the configuration refuses it) signs nothing.
func Sign(secrets []string, id string, ts time.Time, body []byte) string {
	var sigs []string
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(key) == 0 {
			continue
		}
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}

// result is what one attempt came to.
type result struct {
	code       int    // the receiver's answer: an HTTP status, an SMTP reply code (0: none)
	class      string // store.ClassOK or the failure's class
	err        string // what failed, in bindery's words
	retryAfter time.Duration
	gone       bool // the receiver asked never to be called again (410)
	permanent  bool // trying again cannot help (an address the mail server refuses for good)
}

func (r result) ok() bool { return r.class == store.ClassOK }

// Failure classes of an attempt.
const (
	classTimeout  = "timeout"  // no answer within notify.timeout
	classConnect  = "connect"  // the receiver could not be reached (refused, no such host)
	classDropped  = "dropped"  // the connection broke before an answer
	classStatus   = "status"   // an answer that is not 2xx
	classGone     = "gone"     // 410: the endpoint is disabled
	classRefused  = "refused"  // the mail server refused the message
	classTLS      = "tls"      // STARTTLS required and not offered, or a TLS failure
	classInternal = "internal" // bindery failed to make the attempt
)

// postJSON POSTs body to url with headers within ctx and classifies the answer: 2xx is taken,
// 410 is gone, a Retry-After on 429, 502, 503 or 504 is honoured; the answer's body is read (to
// reuse the connection) but never kept.
func postJSON(ctx context.Context, hc *http.Client, url string, headers http.Header, body []byte) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return result{class: classInternal, err: "the request could not be built"}
	}
	req.Header = headers
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bindery-notify")
	resp, err := hc.Do(req)
	if err != nil {
		return transportFailure(ctx, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	r := result{code: resp.StatusCode}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		r.class = store.ClassOK
	case resp.StatusCode == http.StatusGone:
		r.class, r.gone, r.err = classGone, true, "the receiver answered 410 Gone"
	default:
		r.class, r.err = classStatus, fmt.Sprintf("the receiver answered %d", resp.StatusCode)
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			r.retryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	return r
}

// retryAfter reads a Retry-After header: seconds or an HTTP date (0: none, or not readable).
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(n)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// transportFailure classifies an attempt that got no answer.
func transportFailure(ctx context.Context, err error) result {
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
		return result{class: classTimeout, err: "no answer within notify.timeout"}
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, new(*net.DNSError)):
		return result{class: classConnect, err: "the receiver could not be reached"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return result{class: classDropped, err: "the connection was dropped before an answer"}
	case errors.As(err, &oe) && oe.Op == "dial":
		return result{class: classConnect, err: "the receiver could not be reached"}
	}
	return result{class: classDropped, err: "the connection failed before an answer"}
}

// webhook sends deliveries to one configured endpoint.
type webhook struct {
	cfg config.Webhook
	hc  *http.Client
}

func (w webhook) send(ctx context.Context, e store.Event, body []byte) result {
	now := time.Now()
	h := http.Header{}
	h.Set(HeaderID, e.ID)
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(HeaderSignature, Sign(w.cfg.Secrets, e.ID, now, body))
	return postJSON(ctx, w.hc, w.cfg.URL, h, body)
}
