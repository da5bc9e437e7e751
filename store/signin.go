package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Signing people in (docs/api.md, 'Who may call'): the sign-ins on their way through the
// identity provider (signin_attempt) and the sessions that keep a browser signed in
// (signin_session). Both are keyed by the SHA-256 of a random value only the browser holds; the
// values themselves are never stored. Every time comparison is the database's clock, so
// instances with skewed clocks agree on when a session ends.

// SigninAttempt is one sign-in started at GET /auth/login and not finished yet.
type SigninAttempt struct {
	StateHash   string // SHA-256 (hex) of the state the provider sends back
	Nonce       string // the ID token must carry it
	Verifier    string // PKCE code verifier, sent with the code exchange
	NextPath    string // the page of bindery to return to
	RedirectURL string // the callback address the provider was given
}

// PutSigninAttempt records a started sign-in that the callback may take within ttl.
func (db *DB) PutSigninAttempt(ctx context.Context, a SigninAttempt, ttl time.Duration) error {
	_, err := db.rw.ExecContext(ctx, "INSERT INTO signin_attempt (state_hash, nonce, verifier, next_path, redirect_url, expires_at) VALUES (?, ?, ?, ?, ?, "+db.nowPlus()+")",
		a.StateHash, a.Nonce, a.Verifier, a.NextPath, a.RedirectURL, micros(ttl))
	if err = translate(err); err != nil {
		return fmt.Errorf("record sign-in attempt: %w", err)
	}
	return nil
}

// TakeSigninAttempt removes and returns the sign-in whose state hashes to stateHash. Exactly one
// caller gets it, however many callbacks carry the state at once: the delete is the claim.
// ErrNotFound: no such sign-in, it was taken already, or it expired (then it is deleted too).
func (db *DB) TakeSigninAttempt(ctx context.Context, stateHash string) (SigninAttempt, error) {
	a := SigninAttempt{StateHash: stateHash}
	var expired bool
	err := db.rw.QueryRowContext(ctx, "SELECT nonce, verifier, next_path, redirect_url, CASE WHEN expires_at <= "+db.now()+" THEN 1 ELSE 0 END FROM signin_attempt WHERE state_hash = ?",
		stateHash).Scan(&a.Nonce, &a.Verifier, &a.NextPath, &a.RedirectURL, &expired)
	if err = translate(err); err != nil {
		return SigninAttempt{}, fmt.Errorf("sign-in attempt: %w", err)
	}
	res, err := db.rw.ExecContext(ctx, "DELETE FROM signin_attempt WHERE state_hash = ?", stateHash)
	if err != nil {
		return SigninAttempt{}, fmt.Errorf("take sign-in attempt: %w", translate(err))
	}
	if n, _ := res.RowsAffected(); n != 1 || expired {
		return SigninAttempt{}, fmt.Errorf("sign-in attempt taken or expired: %w", ErrNotFound)
	}
	return a, nil
}

// Session is one signed-in browser.
type Session struct {
	IDHash    string // SHA-256 (hex) of the cookie's id
	Account   string // canonical identity
	Name      string // display name
	Groups    []string
	CreatedAt time.Time
	SeenAt    time.Time
}

// SessionLimits are the session rules in force at a request (identity.session.*).
type SessionLimits struct {
	Idle, Absolute time.Duration
	// Touch: a session last seen longer ago than this is marked seen again; more recent use
	// is not written, so a busy page costs no write per request.
	Touch time.Duration
}

// Why a session ended, when Session finds it over.
var (
	ErrSessionIdle     = errors.New("session idle for longer than identity.session.idle")
	ErrSessionAbsolute = errors.New("session older than identity.session.absolute")
)

// CreateSession records a new session; replacing, when set, is the hash of the session the
// browser had before, which ends in the same transaction (a sign-in always starts a new id).
func (db *DB) CreateSession(ctx context.Context, s Session, replacing string) error {
	groups, err := json.Marshal(nonNil(s.Groups))
	if err != nil {
		return fmt.Errorf("session groups: %w", err)
	}
	return db.InTx(ctx, func(tx *Tx) error {
		if replacing != "" {
			if _, err := tx.tx.ExecContext(ctx, "DELETE FROM signin_session WHERE id_hash = ?", replacing); err != nil {
				return fmt.Errorf("end the replaced session: %w", err)
			}
		}
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO signin_session (id_hash, account, display_name, groups_json) VALUES (?, ?, ?, ?)",
			s.IDHash, cut(s.Account, 254), cut(s.Name, 254), string(groups)); err != nil {
			return fmt.Errorf("create session: %w", err)
		}
		return nil
	})
}

// SessionOf returns the live session whose id hashes to idHash, marking it seen (at most once
// per lim.Touch). ErrNotFound: no such session (never created, ended, or purged).
// ErrSessionIdle, ErrSessionAbsolute: it was over by lim, and is deleted now.
func (db *DB) SessionOf(ctx context.Context, idHash string, lim SessionLimits) (Session, error) {
	s := Session{IDHash: idHash}
	var groups string
	var created, seen dbTime
	var ended, stale int
	err := db.ro.QueryRowContext(ctx, "SELECT account, display_name, groups_json, created_at, seen_at, "+
		"CASE WHEN created_at <= "+db.nowPlus()+" THEN 2 WHEN seen_at <= "+db.nowPlus()+" THEN 1 ELSE 0 END, "+
		"CASE WHEN seen_at <= "+db.nowPlus()+" THEN 1 ELSE 0 END FROM signin_session WHERE id_hash = ?",
		-micros(lim.Absolute), -micros(lim.Idle), -micros(lim.Touch), idHash).
		Scan(&s.Account, &s.Name, &groups, &created, &seen, &ended, &stale)
	if err = translate(err); err != nil {
		return Session{}, fmt.Errorf("session: %w", err)
	}
	s.CreatedAt, s.SeenAt = created.T, seen.T
	if ended != 0 {
		if _, err := db.EndSession(ctx, idHash); err != nil {
			return Session{}, err
		}
		if ended == 2 {
			return Session{}, ErrSessionAbsolute
		}
		return Session{}, ErrSessionIdle
	}
	if err := json.Unmarshal([]byte(groups), &s.Groups); err != nil {
		return Session{}, fmt.Errorf("session groups: %w", err)
	}
	if stale == 1 {
		if _, err := db.rw.ExecContext(ctx, "UPDATE signin_session SET seen_at = "+db.now()+" WHERE id_hash = ?", idHash); err != nil {
			return Session{}, fmt.Errorf("mark session seen: %w", translate(err))
		}
	}
	return s, nil
}

// EndSession deletes a session (sign-out) and reports whether there was one.
func (db *DB) EndSession(ctx context.Context, idHash string) (bool, error) {
	res, err := db.rw.ExecContext(ctx, "DELETE FROM signin_session WHERE id_hash = ?", idHash)
	if err != nil {
		return false, fmt.Errorf("end session: %w", translate(err))
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// PurgeSignins deletes, in chunks of batch rows, the sessions over by lim, the sign-ins that
// expired unfinished, and the API tokens that expired or were revoked tokenKeep ago. It returns
// how many rows it deleted; safe on every instance at once (each chunk is one statement on an
// indexed range).
func (db *DB) PurgeSignins(ctx context.Context, lim SessionLimits, tokenKeep time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for _, p := range []struct {
		table, column string
		after         time.Duration
	}{
		{"signin_session", "seen_at", lim.Idle},
		{"signin_session", "created_at", lim.Absolute},
		{"signin_attempt", "expires_at", 0},
		{"api_token", "expires_at", tokenKeep},
		{"api_token", "revoked_at", tokenKeep},
	} {
		for {
			res, err := db.rw.ExecContext(ctx, db.deleteOlderSQL(p.table, p.column), -micros(p.after), batch)
			if err != nil {
				return total, fmt.Errorf("purge %s by %s: %w", p.table, p.column, translate(err))
			}
			n, _ := res.RowsAffected()
			total += n
			if n < int64(batch) {
				break
			}
		}
	}
	return total, nil
}

// deleteOlderSQL deletes up to ? rows of table whose column is at or before the database clock
// plus ? microseconds. MySQL deletes with ORDER BY … LIMIT; SQLite (built without
// SQLITE_ENABLE_UPDATE_DELETE_LIMIT) deletes by rowid from a limited select.
func (db *DB) deleteOlderSQL(table, column string) string {
	where := column + " <= " + db.nowPlus()
	if db.dialect == MySQL {
		return "DELETE FROM " + table + " WHERE " + where + " ORDER BY " + column + " LIMIT ?"
	}
	return "DELETE FROM " + table + " WHERE rowid IN (SELECT rowid FROM " + table + " WHERE " + where + " ORDER BY " + column + " LIMIT ?)"
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}
