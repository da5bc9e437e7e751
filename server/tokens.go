package server

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/platform/signin"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// Personal API tokens (docs/api.md, 'API tokens'): a person makes them on the Settings page for
// their scripts. A token acts as its owner, within its scopes: read (GET) or read and apply
// (apply, revoke, withdraw of the owner's own requests); never the ops endpoints, never an
// operator's powers over other people's requests, never the tokens themselves.

// tokenUse is what a personal API token may do on a route (the route table's column).
type tokenUse int

const (
	tokenNone  tokenUse = iota // not open to API tokens
	tokenRead                  // any token (every token may read)
	tokenApply                 // a token with the apply scope
)

// The scopes a token may hold.
const (
	scopeRead  = "read"
	scopeApply = "apply"
)

// Token limits.
const (
	maxTokenName     = 64
	maxTokenDays     = 365
	defaultTokenDays = 90
	maxLiveTokens    = 50 // per person
)

// tokenAllowed checks an API token's caller against the route before anything else of the
// route runs (withAuth).
func tokenAllowed(rt route, scopes []string) error {
	switch {
	case rt.auth == authOps:
		return apperr.New(apperr.TokenScope, "API tokens never call the ops endpoints: use the ops console, signed in.")
	case rt.tok == tokenNone:
		return apperr.New(apperr.TokenScope, "This route is not open to API tokens: use bindery's pages, signed in.")
	case rt.tok == tokenApply && !slices.Contains(scopes, scopeApply):
		return apperr.New(apperr.TokenScope, "This API token may only read (scope read): applying, revoking and withdrawing need a token with the apply scope.")
	}
	return nil
}

func viewOf(t store.APIToken) api.Token {
	v := api.Token{ID: t.ID, Name: t.Name, Scopes: t.Scopes, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, Expired: t.Expired}
	if !t.LastUsedAt.IsZero() {
		v.LastUsedAt = &t.LastUsedAt
	}
	if !t.RevokedAt.IsZero() {
		v.RevokedAt = &t.RevokedAt
	}
	return v
}

// createToken is POST /api/tokens. It takes no operationId and is not replayed: its answer
// holds the token, which must never be stored — an answer lost on the way means making another
// one (the lost one is listed, and revoked with one click).
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var b api.NewToken
	if err := bindJSON(r, &b, true); err != nil {
		return 0, nil, err
	}
	name, scopes, days, err := checkTokenBody(b)
	if err != nil {
		return 0, nil, err
	}
	caller := infoOf(r).caller
	tok := signin.NewToken()
	stored, err := s.deps.DB.CreateToken(r.Context(), store.APIToken{Owner: caller.ID, Name: name, Scopes: scopes, LookupKey: tok.Lookup, SecretHash: tok.Hash},
		time.Duration(days)*24*time.Hour, maxLiveTokens, s.auditEvent(r, "token.create", map[string]any{"name": name, "scopes": scopes, "days": days}))
	if errors.Is(err, store.ErrTokensFull) {
		return 0, nil, apperr.Wrap(err, apperr.Conflict, "You hold %d live API tokens, the most allowed: revoke one first.", maxLiveTokens)
	}
	if err != nil {
		return 0, nil, err
	}
	w.Header().Set("Cache-Control", "no-store")
	return http.StatusCreated, api.CreatedToken{Token: viewOf(stored), Secret: tok.Value}, nil
}

// checkTokenBody validates a creation: a name (1 to 64 characters, no control characters),
// the scopes ["read"] or ["read", "apply"], and a lifetime in days (1 to 365, default 90).
func checkTokenBody(b api.NewToken) (name string, scopes []string, days int, err error) {
	name = strings.TrimSpace(b.Name)
	switch {
	case name == "":
		return "", nil, 0, apperr.Invalid("name", "is required: say what the token is for")
	case utf8.RuneCountInString(name) > maxTokenName:
		return "", nil, 0, apperr.Invalid("name", "must be at most %d characters", maxTokenName)
	case strings.ContainsFunc(name, unicode.IsControl):
		return "", nil, 0, apperr.Invalid("name", "must not contain control characters")
	}
	sorted := slices.Sorted(slices.Values(b.Scopes))
	switch {
	case slices.Equal(sorted, []string{scopeRead}):
		scopes = []string{scopeRead}
	case slices.Equal(sorted, []string{scopeApply, scopeRead}):
		scopes = []string{scopeRead, scopeApply}
	default:
		return "", nil, 0, apperr.Invalid("scopes", `must be ["read"] or ["read", "apply"]`)
	}
	days = defaultTokenDays
	if b.ExpiresInDays != nil {
		days = *b.ExpiresInDays
	}
	if days < 1 || days > maxTokenDays {
		return "", nil, 0, apperr.Invalid("expiresInDays", "must be a whole number of days from 1 to %d", maxTokenDays)
	}
	return name, scopes, days, nil
}

// listTokens is GET /api/tokens: the caller's tokens that are not revoked, newest first.
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) (int, any, error) {
	toks, err := s.deps.DB.Tokens(r.Context(), infoOf(r).caller.ID)
	if err != nil {
		return 0, nil, err
	}
	list := api.TokenList{Items: make([]api.Token, len(toks)), Max: maxLiveTokens}
	for i, t := range toks {
		list.Items[i] = viewOf(t)
	}
	return http.StatusOK, list, nil
}

// revokeToken is DELETE /api/tokens/{id}: the caller's token stops working at once, on every
// instance. Someone else's token is not found, in the same words as one that does not exist.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, nil, apperr.Invalid("id", "must be a token's id (a positive integer)")
	}
	tok, err := s.deps.DB.RevokeToken(r.Context(), infoOf(r).caller.ID, id, s.auditEvent(r, "token.revoke", map[string]any{"id": id}))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, apperr.Wrap(err, apperr.NotFound, "No such token.")
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, viewOf(tok), nil
}
