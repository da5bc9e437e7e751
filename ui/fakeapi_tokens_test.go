package ui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"bindery/api"
)

// fakeTokens is the fake API's personal API tokens (GET/POST /api/tokens, DELETE
// /api/tokens/{id}), in the shapes of api.Token: per person, newest first, the secret in the
// creation's answer only.
type fakeTokens struct {
	mu   sync.Mutex
	next int64
	by   map[string][]api.Token
}

func (k *fakeTokens) register(mux *http.ServeMux) {
	k.by = map[string][]api.Token{}
	mux.HandleFunc("GET /api/tokens", func(w http.ResponseWriter, r *http.Request) {
		_, id := identity(r)
		k.mu.Lock()
		defer k.mu.Unlock()
		reply(w, 200, api.TokenList{Items: append([]api.Token{}, k.by[id]...), Max: 50})
	})
	mux.HandleFunc("POST /api/tokens", func(w http.ResponseWriter, r *http.Request) {
		_, id := identity(r)
		var b struct {
			Name          string   `json:"name"`
			Scopes        []string `json:"scopes"`
			ExpiresInDays int      `json:"expiresInDays"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Name == "" || len(b.Scopes) == 0 || b.ExpiresInDays < 1 || b.ExpiresInDays > 365 {
			fail(w, 400, "INVALID_ARGUMENT", "name, scopes and expiresInDays (1 to 365) are required")
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		k.next++
		now := time.Now().UTC()
		t := api.Token{ID: k.next, Name: b.Name, Scopes: b.Scopes, CreatedAt: now, ExpiresAt: now.Add(time.Duration(b.ExpiresInDays) * 24 * time.Hour)}
		k.by[id] = append([]api.Token{t}, k.by[id]...)
		reply(w, 201, api.CreatedToken{Token: t, Secret: fmt.Sprintf("bdy_%043d", k.next)})
	})
	mux.HandleFunc("DELETE /api/tokens/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, who := identity(r)
		n, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		k.mu.Lock()
		defer k.mu.Unlock()
		for i, t := range k.by[who] {
			if t.ID == n {
				now := time.Now().UTC()
				t.RevokedAt = &now
				k.by[who] = append(k.by[who][:i:i], k.by[who][i+1:]...)
				reply(w, 200, t)
				return
			}
		}
		fail(w, 404, "NOT_FOUND", "No such token.")
	})
}
