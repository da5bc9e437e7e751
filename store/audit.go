package store

import (
	"bindery/internal/vocab/text"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// AuditEvent is one action to record: who did what, with which parameters. Key identifies the
// event (e.g. "ops.retry:<client operationId>"): recording it again is "already recorded".
type AuditEvent struct {
	Key       string
	Actor     string
	Action    string
	RequestID string
	Params    map[string]any
}

// AuditEntry is a recorded event as the ops console shows it.
type AuditEntry struct {
	ID        int64           `json:"-"`
	At        time.Time       `json:"at"`
	Actor     string          `json:"actor"`
	Action    string          `json:"action"`
	Params    json.RawMessage `json:"params"`
	RequestID string          `json:"requestId"`
}

// RecordAudit stores ev with its parameters redacted and truncated. A duplicate key is an
// answer, not an error: recorded is false and the existing row is left as it is
// (docs/invariants.md, 'Duplicate key is an answer').
func (db *DB) RecordAudit(ctx context.Context, ev AuditEvent) (recorded bool, err error) {
	if ev.Key == "" {
		return false, fmt.Errorf("audit %s: empty event key", ev.Action)
	}
	return recordAudit(ctx, db.rw, ev)
}

// recordAudit is RecordAudit through ex (the pool, or a transaction).
func recordAudit(ctx context.Context, ex execer, ev AuditEvent) (recorded bool, err error) {
	_, err = ex.ExecContext(ctx, "INSERT INTO audit_log (event_key, actor, action, params, request_id) VALUES (?, ?, ?, ?, ?)",
		cut(ev.Key, 191), cut(ev.Actor, 254), cut(ev.Action, 64), string(redactParams(ev.Params)), cut(ev.RequestID, 64))
	switch err = translate(err); {
	case err == nil:
		return true, nil
	case IsDuplicate(err):
		return false, nil
	}
	return false, err
}

// ListAudit returns up to limit entries older than entry beforeID (0: the newest), newest first:
// by the database clock (at, then id), since ids are no order on a distributed MySQL. The API's
// cursor stays an entry's id; the entry itself says where the page goes on (an id no entry has:
// an empty page).
func (db *DB) ListAudit(ctx context.Context, beforeID int64, limit int) ([]AuditEntry, error) {
	q := "SELECT a.id, a.at, a.actor, a.action, a.params, a.request_id FROM audit_log a"
	var args []any
	if beforeID > 0 {
		q += " JOIN audit_log c ON c.id = ? WHERE a.at < c.at OR (a.at = c.at AND a.id < c.id)"
		args = append(args, beforeID)
	}
	rows, err := db.ro.QueryContext(ctx, q+" ORDER BY a.at DESC, a.id DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var at dbTime
		var params string
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &params, &e.RequestID); err != nil {
			return nil, translate(err)
		}
		e.At, e.Params = at.T, json.RawMessage(params)
		out = append(out, e)
	}
	return out, translate(rows.Err())
}

// Audit parameters are bounded: values cut at auditValueLen characters, at most auditItems keys
// or items per level, auditDepth levels, and auditMaxJSON bytes in all.
const (
	auditValueLen = 256
	auditItems    = 50
	auditDepth    = 4
	auditMaxJSON  = 4096
	redacted      = "(redacted)"
)

// secretWords mark a parameter whose value must never be stored, matched in the key's lower-case
// letters (so "apiKey", "api_key" and "API-KEY" all match "apikey"). Bare "key" is not one:
// targetKey is an ordinary parameter.
var secretWords = []string{"password", "passwd", "secret", "token", "apikey", "privatekey", "accesskey", "credential", "authorization", "cookie", "signature", "session"}

func secretLooking(key string) bool {
	var b strings.Builder
	for _, r := range strings.ToLower(key) {
		if r >= 'a' && r <= 'z' {
			b.WriteRune(r)
		}
	}
	k := b.String()
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// redactParams returns params as JSON with secret-looking keys and credential-looking values
// replaced and everything bounded.
func redactParams(params map[string]any) json.RawMessage {
	if params == nil {
		params = map[string]any{}
	}
	out, err := json.Marshal(bound(params, 0))
	if err != nil {
		out = []byte(`{"_unprintable":true}`)
	}
	if len(out) > auditMaxJSON {
		out, _ = json.Marshal(map[string]string{"_truncated": cut(string(out), auditMaxJSON-64)})
	}
	return out
}

func bound(v any, depth int) any {
	if depth >= auditDepth {
		return "(truncated)"
	}
	switch x := v.(type) {
	case nil, bool, float64, float32, int, int64, int32, uint, uint64, json.Number:
		return x
	case string:
		if lower := strings.ToLower(strings.TrimSpace(x)); strings.HasPrefix(lower, "bearer ") || strings.HasPrefix(lower, "basic ") {
			return redacted
		}
		return cut(x, auditValueLen)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := make(map[string]any, min(len(keys), auditItems))
		for i, k := range keys {
			if i == auditItems {
				m["_truncated"] = fmt.Sprintf("%d more keys", len(keys)-auditItems)
				break
			}
			if secretLooking(k) {
				m[cut(k, 64)] = redacted
				continue
			}
			m[cut(k, 64)] = bound(x[k], depth+1)
		}
		return m
	case []any:
		n := min(len(x), auditItems)
		s := make([]any, 0, n+1)
		for _, it := range x[:n] {
			s = append(s, bound(it, depth+1))
		}
		if len(x) > n {
			s = append(s, fmt.Sprintf("(%d more items)", len(x)-n))
		}
		return s
	case []string:
		items := make([]any, len(x))
		for i, it := range x {
			items[i] = it
		}
		return bound(items, depth)
	}
	return cut(fmt.Sprint(v), auditValueLen)
}

// cut keeps at most n bytes of s, marking a cut with an ellipsis: the audit's parameters are one
// JSON document in a TEXT column, whose budget is bytes.
func cut(s string, n int) string { return text.Clip(s, n, text.Bytes, text.Ellipsis) }
