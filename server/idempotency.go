package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"bindery/internal/platform/logging"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// Idempotency of write requests (docs/api.md, 'Idempotency'): one request proceeds, a repeat with
// the same payload replays the original answer, a repeat with another payload is 422, and a
// duplicate arriving while the first is still running waits briefly for its answer. Two ways: an
// application knows its answer before it commits, so its record is written complete in its own
// transaction (answeredOnce: one commit); other writes claim the key first and store the answer
// after (idempotent: claim, work, answer).
const (
	// idemLease is how long a request holds its key before a retry may take it over (the
	// holder crashed). A write's synchronous part takes well under a second.
	idemLease = 30 * time.Second
	// pendingWait bounds how long a concurrent duplicate waits for the winner's answer.
	pendingWait = 3 * time.Second
	pendingPoll = 20 * time.Millisecond
)

// replayFunc turns a stored answer into the answer to a repeat.
type replayFunc func(ctx context.Context, rec store.IdempotencyRecord) (int, any, error)

// replayStored answers a repeat with the stored status and body, unchanged.
func replayStored(_ context.Context, rec store.IdempotencyRecord) (int, any, error) {
	return rec.Status, json.RawMessage(rec.Answer), nil
}

// idempotent runs do at most once for (scope, key) and the caller's payload. Only successful
// answers are stored: a request that failed releases its key, so the client may retry it.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, scope, key string, payload any,
	do func() (int, any, error), replay replayFunc) (int, any, error) {
	ctx := r.Context()
	hash := payloadHash(scope, infoOf(r).caller.ID, payload)
	ttl := s.deps.Config.Current().IdempotencyTTL()
	claim, err := s.deps.DB.ClaimIdempotency(ctx, scope, key, hash, ttl, idemLease)
	for deadline := time.Now().Add(pendingWait); err == nil && claim.Outcome == store.ClaimPending && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, nil, stillProcessing(ctx.Err())
			}
			return 0, nil, apperr.Wrap(ctx.Err(), apperr.Unavailable, "The request was cancelled.")
		case <-time.After(pendingPoll):
		}
		claim, err = s.deps.DB.ClaimIdempotency(ctx, scope, key, hash, ttl, idemLease)
	}
	if err != nil {
		return 0, nil, apperr.Wrap(err, apperr.Unavailable, "The request could not be recorded; please retry.")
	}
	switch claim.Outcome {
	case store.ClaimReplay, store.ClaimMismatch:
		return answered(ctx, claim, replay)
	case store.ClaimPending, store.ClaimRetryLater:
		return 0, nil, stillProcessing(nil)
	}
	// The request's own context may be gone by now (the client left, the deadline passed just
	// after the business write); recording its outcome must not be — with a deadline of its
	// own, which starts when the work is done.
	after := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), s.deps.Config.Current().DatabaseRequestTimeout())
	}
	release := func() {
		bg, cancel := after()
		defer cancel()
		if rerr := s.deps.DB.ReleaseIdempotency(bg, scope, key); rerr != nil {
			s.deps.Log.WarnContext(ctx, "idempotency key not released; a retry waits for its lease", "scope", scope, "key", key, "err", rerr)
		}
	}
	done := false
	defer func() {
		if !done { // do panicked: give the key up on the way to withRecover's 500
			release()
		}
	}()
	status, body, err := do()
	done = true
	if err != nil {
		release()
		return 0, nil, err
	}
	answer, merr := json.Marshal(body)
	if merr == nil {
		bg, cancel := after()
		merr = s.deps.DB.CompleteIdempotency(bg, scope, key, status, answer)
		cancel()
	}
	if merr != nil {
		s.deps.Log.WarnContext(ctx, "idempotency answer not stored; a repeat will run again after the lease", "scope", scope, "key", key, "err", merr)
	}
	return status, body, nil
}

// answeredOnce runs do at most once for (scope, key) and the caller's payload, in one commit,
// for a write whose answer (status and body) is known before it commits — an application. do
// gets the idempotency record to write in its own transaction (store.Answer; the workflow fills
// in the body). A request that fails writes nothing, so a retry runs it again. Duplicates skip
// the claim-then-complete round trips of idempotent: their write finds the key taken — after the
// winner's commit, the database makes it wait — and they answer from the winner's record.
func (s *Server) answeredOnce(r *http.Request, scope, key string, payload any, status int,
	do func(store.Answer) (any, error), replay replayFunc) (int, any, error) {
	ctx := r.Context()
	rec := store.Answer{Scope: scope, Key: key, PayloadHash: payloadHash(scope, infoOf(r).caller.ID, payload),
		TTL: s.deps.Config.Current().IdempotencyTTL(), Status: status}
	for deadline := time.Now().Add(pendingWait); ; {
		body, err := do(rec)
		switch {
		case err == nil:
			return status, body, nil
		case !errors.Is(err, store.ErrKeyTaken):
			return 0, nil, err
		}
		claim, err := s.deps.DB.AnswerOf(ctx, scope, key, rec.PayloadHash)
		if err != nil {
			return 0, nil, apperr.Wrap(err, apperr.Unavailable, "The request could not be recorded; please retry.")
		}
		if claim.Outcome == store.ClaimReplay || claim.Outcome == store.ClaimMismatch {
			return answered(ctx, claim, replay)
		}
		// No answer yet: the winner rolled back or its record was gone (run again now), or an
		// older build's claim still holds the key (wait for its answer).
		if !time.Now().Before(deadline) {
			return 0, nil, stillProcessing(nil)
		}
		if claim.Outcome == store.ClaimPending {
			select {
			case <-ctx.Done():
				return 0, nil, apperr.Wrap(ctx.Err(), apperr.Unavailable, "The request was cancelled.")
			case <-time.After(pendingPoll):
			}
		}
	}
}

// answered is the answer of a key already used: the first request's answer again (replay), or
// 422 when it was used for a different payload.
func answered(ctx context.Context, claim store.Claim, replay replayFunc) (int, any, error) {
	if claim.Outcome == store.ClaimMismatch {
		return 0, nil, apperr.New(apperr.IdempotencyKeyReused, "This operationId was already used for a different request; generate a new one.")
	}
	return replay(ctx, claim.Record)
}

// stillProcessing: the key's first request has not answered yet (409 with Retry-After).
func stillProcessing(cause error) error {
	return apperr.Busy(cause, "A request with this operationId is still being processed; retry shortly.")
}

// payloadHash identifies "the same request": the scope, the caller and the payload. The
// caller is part of it, so another user's request with a known operationId is a different
// payload (422), never a replay of someone else's answer.
func payloadHash(scope, caller string, payload any) string {
	data, err := json.Marshal(payload) // maps marshal with sorted keys: stable
	if err != nil {
		data = []byte(err.Error())
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(scope), []byte(caller), data} {
		h.Write([]byte{0})
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// audit records an action before it runs, so that even an action that fails or crashes midway
// is on record. The key is the client's operationId of the action: a replay or a retry of the
// same action is "already recorded". Without an audit record the action does not run.
func (s *Server) audit(r *http.Request, action, key string, params map[string]any) error {
	_, err := s.deps.DB.RecordAudit(r.Context(), store.AuditEvent{
		Key: action + ":" + key, Actor: infoOf(r).caller.ID, Action: action,
		RequestID: logging.RequestID(r.Context()), Params: params,
	})
	if err != nil {
		return apperr.Wrap(err, apperr.Unavailable, "The action could not be audited, so it was not run; please retry.")
	}
	return nil
}
