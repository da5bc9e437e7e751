package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/store"
	"bindery/store/storetest"
)

var limits = store.SessionLimits{Idle: 8 * time.Hour, Absolute: 168 * time.Hour, Touch: time.Minute}

// A state is good for one callback: of many callbacks that carry it at once exactly one gets
// the sign-in, and afterwards nobody does.
func TestASignInAttemptIsTakenOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		a := store.SigninAttempt{StateHash: hash64("s1"), Nonce: "n1", Verifier: "v1", NextPath: "/requests", RedirectURL: "http://b.example/auth/callback"}
		if err := db.PutSigninAttempt(ctx, a, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		var won atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := db.TakeSigninAttempt(ctx, a.StateHash)
				switch {
				case err == nil:
					won.Add(1)
					if got != a {
						t.Errorf("taken %+v, want %+v", got, a)
					}
				case !errors.Is(err, store.ErrNotFound):
					t.Errorf("take: %v", err)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d callbacks got the sign-in, want 1", won.Load())
		}
		if n := count(t, db, "SELECT COUNT(*) FROM signin_attempt"); n != 0 {
			t.Fatalf("%d attempts left", n)
		}
		// An attempt past its time is not found, and gone.
		b := a
		b.StateHash = hash64("s2")
		if err := db.PutSigninAttempt(ctx, b, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		storetest.Backdate(t, db, "signin_attempt", "expires_at", "state_hash", b.StateHash, time.Second)
		if _, err := db.TakeSigninAttempt(ctx, b.StateHash); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an expired attempt: %v", err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM signin_attempt"); n != 0 {
			t.Fatalf("the expired attempt is still there (%d rows)", n)
		}
	})
}

// A session lives until idle or absolute expiry by the database clock, and ends with the row.
func TestASessionEndsWhenIdleOrTooOld(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		s := store.Session{IDHash: hash64("id-1"), Account: "alice@example.com", Name: "Alice", Groups: []string{"staff", "auditors"}}
		if err := db.CreateSession(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
		got, err := db.SessionOf(ctx, s.IDHash, limits)
		if err != nil || got.Account != s.Account || got.Name != s.Name || !slices.Equal(got.Groups, s.Groups) || got.CreatedAt.IsZero() {
			t.Fatalf("session = %+v, %v", got, err)
		}
		if _, err := db.SessionOf(ctx, hash64("nobody"), limits); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown session: %v", err)
		}

		// Use is recorded at most once per Touch: a session seen two minutes ago is seen now.
		storetest.Backdate(t, db, "signin_session", "seen_at", "id_hash", s.IDHash, 2*time.Minute)
		if _, err := db.SessionOf(ctx, s.IDHash, limits); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM signin_session WHERE seen_at < created_at"); n != 0 {
			t.Fatal("a use after Touch did not mark the session seen")
		}

		storetest.Backdate(t, db, "signin_session", "seen_at", "id_hash", s.IDHash, limits.Idle+time.Second)
		if _, err := db.SessionOf(ctx, s.IDHash, limits); !errors.Is(err, store.ErrSessionIdle) {
			t.Fatalf("an idle session: %v", err)
		}
		if _, err := db.SessionOf(ctx, s.IDHash, limits); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an idle session is deleted; then: %v", err)
		}

		// Absolute expiry holds however recently the session was used.
		s2 := store.Session{IDHash: hash64("id-2"), Account: "bob@example.com"}
		if err := db.CreateSession(ctx, s2, ""); err != nil {
			t.Fatal(err)
		}
		storetest.Backdate(t, db, "signin_session", "created_at", "id_hash", s2.IDHash, limits.Absolute+time.Second)
		if _, err := db.SessionOf(ctx, s2.IDHash, limits); !errors.Is(err, store.ErrSessionAbsolute) {
			t.Fatalf("a session past its absolute end: %v", err)
		}
		// A shorter idle in force ends a session at once (the limits are read at each request).
		s3 := store.Session{IDHash: hash64("id-3"), Account: "carol@example.com"}
		if err := db.CreateSession(ctx, s3, ""); err != nil {
			t.Fatal(err)
		}
		storetest.Backdate(t, db, "signin_session", "seen_at", "id_hash", s3.IDHash, 10*time.Minute)
		if _, err := db.SessionOf(ctx, s3.IDHash, store.SessionLimits{Idle: 5 * time.Minute, Absolute: time.Hour, Touch: time.Minute}); !errors.Is(err, store.ErrSessionIdle) {
			t.Fatalf("under a shorter idle: %v", err)
		}
	})
}

// A new sign-in in a browser that had a session ends that session in the same transaction;
// sign-out deletes the row.
func TestASignInReplacesTheBrowsersSessionAndSignOutDeletesIt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		old := store.Session{IDHash: hash64("old"), Account: "alice@example.com"}
		if err := db.CreateSession(ctx, old, ""); err != nil {
			t.Fatal(err)
		}
		fresh := store.Session{IDHash: hash64("new"), Account: "alice@example.com"}
		if err := db.CreateSession(ctx, fresh, old.IDHash); err != nil {
			t.Fatal(err)
		}
		if _, err := db.SessionOf(ctx, old.IDHash, limits); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the replaced session: %v", err)
		}
		if ok, err := db.EndSession(ctx, fresh.IDHash); !ok || err != nil {
			t.Fatalf("sign-out = %v, %v", ok, err)
		}
		if ok, err := db.EndSession(ctx, fresh.IDHash); ok || err != nil {
			t.Fatalf("sign-out again = %v, %v", ok, err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM signin_session"); n != 0 {
			t.Fatalf("%d sessions left", n)
		}
	})
}

// The purge deletes what is over and keeps what is live.
func TestThePurgeDeletesEndedSessionsAttemptsAndOldTokens(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		for i, age := range []struct {
			column string
			ago    time.Duration
		}{{"seen_at", 0}, {"seen_at", limits.Idle + time.Minute}, {"created_at", limits.Absolute + time.Minute}} {
			s := store.Session{IDHash: hash64(fmt.Sprint("s", i)), Account: "alice@example.com"}
			if err := db.CreateSession(ctx, s, ""); err != nil {
				t.Fatal(err)
			}
			storetest.Backdate(t, db, "signin_session", age.column, "id_hash", s.IDHash, age.ago)
		}
		for i, ttl := range []time.Duration{time.Minute, -time.Second} {
			if err := db.PutSigninAttempt(ctx, store.SigninAttempt{StateHash: hash64(fmt.Sprint("a", i)), NextPath: "/"}, ttl); err != nil {
				t.Fatal(err)
			}
		}
		live := mustToken(t, db, "alice@example.com", "live")
		expired := mustToken(t, db, "alice@example.com", "expired long ago")
		storetest.Backdate(t, db, "api_token", "expires_at", "id", expired.ID, 31*24*time.Hour)
		revoked := mustToken(t, db, "alice@example.com", "revoked long ago")
		if _, err := db.RevokeToken(ctx, "alice@example.com", revoked.ID, tokenAudit("token.revoke")); err != nil {
			t.Fatal(err)
		}
		storetest.Backdate(t, db, "api_token", "revoked_at", "id", revoked.ID, 31*24*time.Hour)
		recent := mustToken(t, db, "alice@example.com", "revoked just now")
		if _, err := db.RevokeToken(ctx, "alice@example.com", recent.ID, tokenAudit("token.revoke")); err != nil {
			t.Fatal(err)
		}

		n, err := db.PurgeSignins(ctx, limits, 30*24*time.Hour, 1) // chunks of one row: the loop runs
		if err != nil || n != 5 {
			t.Fatalf("purged %d, %v; want 5", n, err)
		}
		if s, a := count(t, db, "SELECT COUNT(*) FROM signin_session"), count(t, db, "SELECT COUNT(*) FROM signin_attempt"); s != 1 || a != 1 {
			t.Fatalf("left %d sessions and %d attempts, want the live one of each", s, a)
		}
		var ids []int64
		rows, err := db.Raw().Query("SELECT id FROM api_token ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		if !slices.Equal(ids, []int64{live.ID, recent.ID}) {
			t.Fatalf("tokens left %v, want %v (live) and %v (revoked recently: its use is still answered 'revoked')", ids, live.ID, recent.ID)
		}
	})
}

func mustToken(t testing.TB, db *store.DB, owner, name string) store.APIToken {
	t.Helper()
	tok, err := db.CreateToken(context.Background(), store.APIToken{Owner: owner, Name: name, Scopes: []string{"read"},
		LookupKey: fmt.Sprintf("%016x", tokenSeq.Add(1)), SecretHash: hash64(name)}, 24*time.Hour, 50, tokenAudit("token.create"))
	if err != nil {
		t.Fatalf("create token %q: %v", name, err)
	}
	return tok
}

var tokenSeq atomic.Int64

func tokenAudit(action string) store.AuditEvent {
	return store.AuditEvent{Actor: "alice@example.com", Action: action, Params: map[string]any{"name": "x"}}
}

func hash64(s string) string { return fmt.Sprintf("%064x", []byte(s)) }

// A token is stored as it was given, listed (never revoked ones) newest first, found by its
// lookup key until it is revoked, expired by the database clock; each use is audited with it.
func TestATokenIsListedUsedAuditedAndRevoked(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		first := mustToken(t, db, "alice@example.com", "deploy script")
		second, err := db.CreateToken(ctx, store.APIToken{Owner: "alice@example.com", Name: "onboarding", Scopes: []string{"read", "apply"},
			LookupKey: "00000000000000aa", SecretHash: hash64("onboarding")}, 2*time.Hour, 50, tokenAudit("token.create"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(second.Scopes, []string{"read", "apply"}) || second.Expired || second.ExpiresAt.Sub(second.CreatedAt).Round(time.Second) != 2*time.Hour {
			t.Fatalf("created %+v", second)
		}
		mustToken(t, db, "bob@example.com", "bob's")
		if n := count(t, db, "SELECT COUNT(*) FROM audit_log WHERE action = 'token.create' AND event_key = ?", fmt.Sprintf("token.create:%d", second.ID)); n != 1 {
			t.Fatalf("the creation is audited %d times", n)
		}
		list, err := db.Tokens(ctx, "alice@example.com")
		if err != nil || len(list) != 2 || list[0].ID != second.ID || list[1].ID != first.ID {
			t.Fatalf("alice's tokens: %+v, %v", list, err)
		}

		got, err := db.TokenByLookup(ctx, "00000000000000aa")
		if err != nil || got.ID != second.ID || got.SecretHash != hash64("onboarding") || !got.LastUsedAt.IsZero() {
			t.Fatalf("by lookup: %+v, %v", got, err)
		}
		if err := db.UseToken(ctx, second.ID, store.AuditEvent{Key: "token.use:r1", Actor: "alice@example.com", Action: "token.use", Params: map[string]any{"id": second.ID}}); err != nil {
			t.Fatal(err)
		}
		if got, _ := db.TokenByLookup(ctx, "00000000000000aa"); got.LastUsedAt.IsZero() {
			t.Fatal("the use was not recorded")
		}
		if n := count(t, db, "SELECT COUNT(*) FROM audit_log WHERE action = 'token.use' AND params LIKE ?", fmt.Sprintf(`%%"id":%d%%`, second.ID)); n != 1 {
			t.Fatalf("%d audit rows name the token", n)
		}

		// Someone else's token is not found, and stays live.
		if _, err := db.RevokeToken(ctx, "bob@example.com", second.ID, tokenAudit("token.revoke")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("bob revoking alice's token: %v", err)
		}
		rev, err := db.RevokeToken(ctx, "alice@example.com", second.ID, tokenAudit("token.revoke"))
		if err != nil || rev.RevokedAt.IsZero() {
			t.Fatalf("revoke = %+v, %v", rev, err)
		}
		if again, err := db.RevokeToken(ctx, "alice@example.com", second.ID, tokenAudit("token.revoke")); err != nil || !again.RevokedAt.Equal(rev.RevokedAt) {
			t.Fatalf("revoke again = %+v, %v", again, err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM audit_log WHERE event_key = ?", fmt.Sprintf("token.revoke:%d", second.ID)); n != 1 {
			t.Fatalf("the revocation is audited %d times (a second revocation records nothing)", n)
		}
		if got, _ := db.TokenByLookup(ctx, "00000000000000aa"); got.RevokedAt.IsZero() {
			t.Fatal("a revoked token reads as live")
		}
		if list, _ := db.Tokens(ctx, "alice@example.com"); len(list) != 1 || list[0].ID != first.ID {
			t.Fatalf("after the revocation: %+v", list)
		}
		storetest.Backdate(t, db, "api_token", "expires_at", "id", first.ID, time.Second)
		if got, _ := db.TokenByLookup(ctx, first.LookupKey); !got.Expired {
			t.Fatal("a token past its expiry reads as live")
		}
	})
}

// However many requests create tokens for one person at once, at most the cap are live; a
// revoked or expired token gives its place up.
func TestTokensPerPersonAreCappedUnderConcurrency(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		const limit, tries = 5, 12
		var made, full atomic.Int32
		var wg sync.WaitGroup
		for i := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := db.CreateToken(ctx, store.APIToken{Owner: "alice@example.com", Name: fmt.Sprint("t", i), Scopes: []string{"read"},
					LookupKey: fmt.Sprintf("%016x", 1000+i), SecretHash: hash64(fmt.Sprint("t", i))}, time.Hour, limit, tokenAudit("token.create"))
				switch {
				case err == nil:
					made.Add(1)
				case errors.Is(err, store.ErrTokensFull):
					full.Add(1)
				default:
					t.Errorf("create: %v", err)
				}
			}()
		}
		wg.Wait()
		if made.Load() != limit || full.Load() != tries-limit {
			t.Fatalf("made %d, refused %d; want %d and %d", made.Load(), full.Load(), limit, tries-limit)
		}
		if n := count(t, db, "SELECT COUNT(DISTINCT slot) FROM api_token WHERE owner = 'alice@example.com' AND slot IS NOT NULL"); n != limit {
			t.Fatalf("%d slots taken, want %d", n, limit)
		}
		list, _ := db.Tokens(ctx, "alice@example.com")
		if _, err := db.RevokeToken(ctx, "alice@example.com", list[0].ID, tokenAudit("token.revoke")); err != nil {
			t.Fatal(err)
		}
		storetest.Backdate(t, db, "api_token", "expires_at", "id", list[1].ID, time.Second)
		for i := range 2 {
			if _, err := db.CreateToken(ctx, store.APIToken{Owner: "alice@example.com", Name: "again", Scopes: []string{"read"},
				LookupKey: fmt.Sprintf("%016x", 2000+i), SecretHash: hash64(fmt.Sprint("again", i))}, time.Hour, limit, tokenAudit("token.create")); err != nil {
				t.Fatalf("a place freed by a revocation and an expiry: %v", err)
			}
		}
		if _, err := db.CreateToken(ctx, store.APIToken{Owner: "alice@example.com", Name: "one too many", Scopes: []string{"read"},
			LookupKey: "0000000000002fff", SecretHash: hash64("x")}, time.Hour, limit, tokenAudit("token.create")); !errors.Is(err, store.ErrTokensFull) {
			t.Fatalf("over the cap again: %v", err)
		}
	})
}
