package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Personal API tokens (docs/api.md, 'API tokens'). The secret is never stored: a row holds the
// token's lookup key (a non-secret prefix of it) and the SHA-256 of the whole token.

// APIToken is one token as the store knows it.
type APIToken struct {
	ID         int64
	Owner      string // canonical identity the token acts as
	Name       string
	Scopes     []string // "read", or "read" and "apply"
	LookupKey  string
	SecretHash string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastUsedAt time.Time // zero: never used
	RevokedAt  time.Time // zero: not revoked
	Expired    bool      // past ExpiresAt by the database clock, when read
}

// ErrTokensFull: the owner holds the most live tokens allowed.
var ErrTokensFull = errors.New("too many live API tokens")

const tokenColumns = "id, owner, name, scopes, lookup_key, secret_hash, created_at, expires_at, last_used_at, revoked_at"

// CreateToken records t (its ID, times and Expired are ignored) to expire after ttl, in a free
// slot of the owner's at most max live tokens, and ev in the audit log in the same transaction
// (its key is "<action>:<the token's id>", its parameters get the id), and returns the token as
// stored. ErrTokensFull when every slot is taken. The unique (owner, slot) key is what holds the
// cap when several requests create tokens at once: the loser of a slot takes the next free one.
func (db *DB) CreateToken(ctx context.Context, t APIToken, ttl time.Duration, max int, ev AuditEvent) (APIToken, error) {
	// An expired token gives its slot up; a revoked one did when it was revoked.
	if _, err := db.rw.ExecContext(ctx, "UPDATE api_token SET slot = NULL WHERE owner = ? AND slot IS NOT NULL AND expires_at <= "+db.now(), t.Owner); err != nil {
		return APIToken{}, fmt.Errorf("free expired token slots: %w", translate(err))
	}
	for range max + 1 {
		slot, err := db.freeTokenSlot(ctx, t.Owner, max)
		if err != nil {
			return APIToken{}, err
		}
		var id int64
		err = db.InTx(ctx, func(tx *Tx) error {
			res, err := tx.tx.ExecContext(ctx, "INSERT INTO api_token (owner, slot, name, scopes, lookup_key, secret_hash, expires_at) VALUES (?, ?, ?, ?, ?, ?, "+db.nowPlus()+")",
				t.Owner, slot, t.Name, strings.Join(t.Scopes, " "), t.LookupKey, t.SecretHash, micros(ttl))
			if err != nil {
				return err
			}
			if id, err = res.LastInsertId(); err != nil {
				return err
			}
			_, err = recordAudit(ctx, tx.tx, auditOfToken(ev, id))
			return err
		})
		switch {
		case errors.Is(err, ErrDuplicate) && !db.lookupTaken(ctx, t.LookupKey):
			continue // another request took the slot at the same moment: the next free one
		case err != nil:
			return APIToken{}, fmt.Errorf("create token: %w", err)
		}
		return db.tokenWhere(ctx, "id = ?", id)
	}
	return APIToken{}, fmt.Errorf("create token: no slot after %d tries: %w", max+1, ErrRetry)
}

// freeTokenSlot is the lowest slot in 1..max the owner's live tokens leave free.
func (db *DB) freeTokenSlot(ctx context.Context, owner string, max int) (int, error) {
	rows, err := db.rw.QueryContext(ctx, "SELECT slot FROM api_token WHERE owner = ? AND slot IS NOT NULL ORDER BY slot", owner)
	if err != nil {
		return 0, fmt.Errorf("token slots: %w", translate(err))
	}
	defer rows.Close()
	next := 1
	for rows.Next() {
		var s int
		if err := rows.Scan(&s); err != nil {
			return 0, fmt.Errorf("token slots: %w", translate(err))
		}
		if s > next {
			break
		}
		next = s + 1
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("token slots: %w", translate(err))
	}
	if next > max {
		return 0, ErrTokensFull
	}
	return next, nil
}

// lookupTaken reports whether a token already has lookupKey (a duplicate that is not a slot's).
func (db *DB) lookupTaken(ctx context.Context, lookupKey string) bool {
	var n int
	return db.rw.QueryRowContext(ctx, "SELECT COUNT(*) FROM api_token WHERE lookup_key = ?", lookupKey).Scan(&n) == nil && n > 0
}

// TokenByLookup returns the token whose lookup key is lookupKey, revoked and expired ones too
// (the caller says which it was). ErrNotFound when there is none.
func (db *DB) TokenByLookup(ctx context.Context, lookupKey string) (APIToken, error) {
	return db.tokenWhere(ctx, "lookup_key = ?", lookupKey)
}

func (db *DB) tokenWhere(ctx context.Context, where string, arg any) (APIToken, error) {
	t, err := scanToken(db.rw.QueryRowContext(ctx, "SELECT "+tokenColumns+", CASE WHEN expires_at <= "+db.now()+" THEN 1 ELSE 0 END FROM api_token WHERE "+where, arg))
	if err != nil {
		return APIToken{}, fmt.Errorf("token: %w", err)
	}
	return t, nil
}

func scanToken(s scanner) (APIToken, error) {
	var t APIToken
	var scopes string
	var created, expires, used, revoked dbTime
	if err := s.Scan(&t.ID, &t.Owner, &t.Name, &scopes, &t.LookupKey, &t.SecretHash, &created, &expires, &used, &revoked, &t.Expired); err != nil {
		return APIToken{}, translate(err)
	}
	t.Scopes = strings.Fields(scopes)
	t.CreatedAt, t.ExpiresAt, t.LastUsedAt, t.RevokedAt = created.T, expires.T, used.T, revoked.T
	return t, nil
}

// Tokens lists owner's tokens that are not revoked (expired ones too, until purged), newest
// first.
func (db *DB) Tokens(ctx context.Context, owner string) ([]APIToken, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+tokenColumns+", CASE WHEN expires_at <= "+db.now()+" THEN 1 ELSE 0 END FROM api_token "+
		"WHERE owner = ? AND revoked_at IS NULL ORDER BY created_at DESC, id DESC", owner)
	if err != nil {
		return nil, fmt.Errorf("tokens of %s: %w", owner, translate(err))
	}
	defer rows.Close()
	out := []APIToken{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("tokens of %s: %w", owner, err)
		}
		out = append(out, t)
	}
	return out, translate(rows.Err())
}

// RevokeToken revokes owner's token id, with ev in the audit log in the same transaction (key
// "<action>:<id>"), and returns it; revoking it again returns it unchanged (and records
// nothing). ErrNotFound: no such token of owner's (someone else's is not found either).
func (db *DB) RevokeToken(ctx context.Context, owner string, id int64, ev AuditEvent) (APIToken, error) {
	err := db.InTx(ctx, func(tx *Tx) error {
		res, err := tx.tx.ExecContext(ctx, "UPDATE api_token SET revoked_at = "+db.now()+", slot = NULL WHERE id = ? AND owner = ? AND revoked_at IS NULL", id, owner)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			_, err = recordAudit(ctx, tx.tx, auditOfToken(ev, id))
		}
		return err
	})
	if err != nil {
		return APIToken{}, fmt.Errorf("revoke token %d: %w", id, err)
	}
	t, err := db.tokenWhere(ctx, "id = ?", id)
	if err != nil || t.Owner != owner {
		return APIToken{}, fmt.Errorf("revoke token %d: %w", id, ErrNotFound)
	}
	return t, nil
}

// UseToken records one use of token id: its last use, and ev in the audit log, in one
// transaction — a use that cannot be audited is not recorded at all, and the caller refuses it.
func (db *DB) UseToken(ctx context.Context, id int64, ev AuditEvent) error {
	return db.InTx(ctx, func(tx *Tx) error {
		if _, err := tx.tx.ExecContext(ctx, "UPDATE api_token SET last_used_at = "+db.now()+" WHERE id = ?", id); err != nil {
			return fmt.Errorf("token %d used: %w", id, err)
		}
		if _, err := recordAudit(ctx, tx.tx, ev); err != nil {
			return fmt.Errorf("audit the use of token %d: %w", id, err)
		}
		return nil
	})
}

// auditOfToken is ev about token id: keyed by its action and the id, the id among its
// parameters.
func auditOfToken(ev AuditEvent, id int64) AuditEvent {
	ev.Key = fmt.Sprintf("%s:%d", ev.Action, id)
	params := map[string]any{"id": id}
	for k, v := range ev.Params {
		params[k] = v
	}
	ev.Params = params
	return ev
}
