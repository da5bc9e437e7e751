package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"bindery/store"
	"bindery/store/storetest"
)

func TestAuditRedactsSecretsAndBoundsParameters(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		long := strings.Repeat("x", 1000)
		items := make([]any, 80)
		for i := range items {
			items[i] = i
		}
		ok, err := db.RecordAudit(ctx, store.AuditEvent{
			Key: "ops.retry:a1", Actor: "ops@example.com", Action: "ops.retry", RequestID: "req-1",
			Params: map[string]any{
				"targetKey": "payments-db-readonly", "password": "hunter2", "apiKey": "k-123", "X-Gitlab-Token": "t",
				"header": "Bearer abc.def", "nested": map[string]any{"client_secret": "s", "ok": "fine"},
				"reason": long, "list": items, "__authenticatedOperator": "ops@example.com",
			},
		})
		if err != nil || !ok {
			t.Fatalf("record: %v %v", ok, err)
		}
		entries, err := db.ListAudit(ctx, 0, 10)
		if err != nil || len(entries) != 1 {
			t.Fatalf("list: %v %v", entries, err)
		}
		e := entries[0]
		raw := string(e.Params)
		for _, leak := range []string{"hunter2", "k-123", `"t"`, "abc.def", `"s"`, long} {
			if strings.Contains(raw, leak) {
				t.Errorf("stored params leak %q: %s", leak, raw)
			}
		}
		var p map[string]any
		if err := json.Unmarshal(e.Params, &p); err != nil {
			t.Fatalf("params are not JSON: %v", err)
		}
		if p["targetKey"] != "payments-db-readonly" || p["__authenticatedOperator"] != "ops@example.com" || p["nested"].(map[string]any)["ok"] != "fine" {
			t.Errorf("ordinary parameters lost: %s", raw)
		}
		if r := p["reason"].(string); len(r) > 256 || !strings.HasSuffix(r, "…") {
			t.Errorf("long value not cut: %d bytes", len(r))
		}
		if l := p["list"].([]any); len(l) != 51 {
			t.Errorf("list of 80 kept %d items", len(l))
		}
		if e.Actor != "ops@example.com" || e.Action != "ops.retry" || e.RequestID != "req-1" || e.At.IsZero() {
			t.Errorf("entry %+v", e)
		}
	})
}

func TestAuditDuplicateIsAlreadyRecordedNeverOverwritten(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		first := store.AuditEvent{Key: "revoke:k1", Actor: "alice@example.com", Action: "revoke", RequestID: "r1", Params: map[string]any{"n": 1}}
		if ok, err := db.RecordAudit(ctx, first); !ok || err != nil {
			t.Fatal(ok, err)
		}
		second := first
		second.Actor, second.Params = "mallory@example.com", map[string]any{"n": 2}
		if ok, err := db.RecordAudit(ctx, second); ok || err != nil {
			t.Fatalf("duplicate: recorded=%v err=%v, want already recorded", ok, err)
		}
		entries, _ := db.ListAudit(ctx, 0, 10)
		if len(entries) != 1 || entries[0].Actor != "alice@example.com" || string(entries[0].Params) != `{"n":1}` {
			t.Fatalf("entries %+v", entries)
		}
	})
}

func TestAuditListsNewestFirstByPage(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			db.RecordAudit(ctx, store.AuditEvent{Key: k, Actor: "ops@example.com", Action: k, RequestID: "r"})
		}
		page1, _ := db.ListAudit(ctx, 0, 2)
		page2, _ := db.ListAudit(ctx, page1[1].ID, 2)
		page3, _ := db.ListAudit(ctx, page2[1].ID, 2)
		var got []string
		for _, p := range [][]store.AuditEntry{page1, page2, page3} {
			for _, e := range p {
				got = append(got, e.Action)
			}
		}
		if strings.Join(got, "") != "edcba" {
			t.Fatalf("order %v", got)
		}
		if string(page1[0].Params) != "{}" {
			t.Fatalf("nil params stored as %s", page1[0].Params)
		}
	})
}
