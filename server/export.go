package server

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"bindery/api"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// The audit export (docs/api.md, 'The audit export'): every application and every audited action
// of a time range, with the request each concerned — who, what, when, the request, its ticket,
// who approved it, its merge request and when it came into effect — streamed row by row as CSV or
// NDJSON. The range is walked in pages of exportPage rows in time order (applications first, then
// the audited actions), each page written and flushed before the next is read: memory holds one
// page, however long the range.

// exportPage is how many rows one read of the walk brings.
const exportPage = 500

// exportColumns are the CSV's columns, in order (and the NDJSON's fields).
var exportColumns = []string{"at", "kind", "actor", "action", "request", "subject", "target", "ticket", "approver", "mr", "inEffectAt", "params"}

// exportRange reads from and to (RFC 3339, both required, from before to) and the format.
func exportRange(r *http.Request) (from, to time.Time, format string, err error) {
	q := r.URL.Query()
	for _, p := range []struct {
		name string
		into *time.Time
	}{{"from", &from}, {"to", &to}} {
		v := q.Get(p.name)
		if *p.into, err = time.Parse(time.RFC3339, v); err != nil {
			return from, to, "", apperr.Invalid(p.name, "must be an RFC 3339 time such as 2026-07-01T00:00:00Z")
		}
	}
	if !from.Before(to) {
		return from, to, "", apperr.Invalid("to", "must be after from")
	}
	switch format = q.Get("format"); format {
	case "":
		format = "csv"
	case "csv", "ndjson":
	default:
		return from, to, "", apperr.Invalid("format", "must be csv or ndjson")
	}
	return from.UTC(), to.UTC(), format, nil
}

// opsAuditExport is GET /api/ops/audit/export?from=&to=&format=csv|ndjson (operators).
func (s *Server) opsAuditExport(w http.ResponseWriter, r *http.Request) (int, any, error) {
	from, to, format, err := exportRange(r)
	if err != nil {
		return 0, nil, err
	}
	out := newExportWriter(w, format, "bindery-audit-"+from.Format("20060102")+"-"+to.Format("20060102"), exportColumns)
	err = s.walkExport(r.Context(), from, to, func(rec api.AuditRecord) error {
		if err := out.row(rec, csvCells(rec)); err != nil {
			return err
		}
		return r.Context().Err() // the client went away: stop reading
	})
	if err == nil {
		err = out.flush()
	}
	if err != nil {
		// The header and rows already went out: the stream ends short, and the log says why.
		s.deps.Log.WarnContext(r.Context(), "audit export ended early", "err", err)
	}
	return 0, nil, nil
}

// walkExport calls row for every application and audited action of [from, to), in pages.
func (s *Server) walkExport(ctx context.Context, from, to time.Time, row func(api.AuditRecord) error) error {
	db := s.deps.DB
	// Each page's reads have database.requestTimeout (the route has no deadline of its own).
	page := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, s.deps.Config.Current().DatabaseRequestTimeout())
	}
	var c store.ExportCursor
	for {
		pctx, cancel := page()
		apps, next, err := db.ApplicationsBetween(pctx, from, to, c, exportPage)
		cancel()
		if err != nil {
			return err
		}
		for _, f := range apps {
			rec := recordOf(f)
			rec.At, rec.Kind, rec.Actor, rec.Action = f.CreatedAt, "application", f.Subject, "apply"
			if err := row(rec); err != nil {
				return err
			}
		}
		if len(apps) < exportPage {
			break
		}
		c = next
	}
	c = store.ExportCursor{}
	for {
		pctx, cancel := page()
		entries, err := db.AuditBetween(pctx, from, to, c, exportPage)
		if err != nil {
			cancel()
			return err
		}
		var ids []string
		for _, e := range entries {
			if id := requestOf(e.Params); id != "" {
				ids = append(ids, id)
			}
		}
		facts, err := db.FactsOf(pctx, ids)
		cancel()
		if err != nil {
			return err
		}
		for _, e := range entries {
			rec := api.AuditRecord{Request: requestOf(e.Params)}
			if f, ok := facts[rec.Request]; ok {
				rec = recordOf(f)
			}
			rec.At, rec.Kind, rec.Actor, rec.Action, rec.Params = e.At, "action", e.Actor, e.Action, string(e.Params)
			if err := row(rec); err != nil {
				return err
			}
		}
		if len(entries) < exportPage {
			return nil
		}
		c = store.ExportCursor{At: entries[len(entries)-1].At, ID: entries[len(entries)-1].ID}
	}
}

// requestOf is the request an audited action concerned, as its parameters name it.
func requestOf(params json.RawMessage) string {
	var p struct {
		Request     string `json:"request"`
		OperationID string `json:"operationId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	if p.Request != "" {
		return p.Request
	}
	return p.OperationID
}

// recordOf is what an export row says of a request.
func recordOf(f store.RequestFacts) api.AuditRecord {
	return api.AuditRecord{Request: f.OperationID, Subject: f.Subject, Target: f.TargetKey, Ticket: f.TicketID, Approver: f.DecidedBy,
		MR: f.MRIID, Project: f.Project, InEffectAt: f.DeployedAt}
}

// exportWriter writes rows as CSV (under its columns) or NDJSON, flushing to the client every
// exportPage rows: the audit export's and a review's.
type exportWriter struct {
	columns []string
	w       http.ResponseWriter
	buf     *bufio.Writer
	csv     *csv.Writer
	json    *json.Encoder
	n       int
	header  bool
}

func newExportWriter(w http.ResponseWriter, format, name string, columns []string) *exportWriter {
	ew := &exportWriter{w: w, columns: columns, buf: bufio.NewWriterSize(w, 32<<10)}
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
		ew.csv = csv.NewWriter(ew.buf)
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.ndjson"`)
		ew.json = json.NewEncoder(ew.buf)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return ew
}

// row writes one record: rec as NDJSON, or its cells as CSV (the header first).
func (ew *exportWriter) row(rec any, cells []string) error {
	if ew.json != nil {
		if err := ew.json.Encode(rec); err != nil {
			return err
		}
	} else {
		if !ew.header {
			ew.header = true
			if err := ew.csv.Write(ew.columns); err != nil {
				return err
			}
		}
		if err := ew.csv.Write(cells); err != nil {
			return err
		}
	}
	if ew.n++; ew.n%exportPage == 0 {
		// A long stream keeps its connection: each page pushes the write deadline on.
		_ = http.NewResponseController(ew.w).SetWriteDeadline(time.Now().Add(exportWriteWindow))
		return ew.flush()
	}
	return nil
}

// exportWriteWindow is how long the client may take to read a page of the export.
const exportWriteWindow = time.Minute

// flush sends what is written to the client (an empty CSV still gets its header).
func (ew *exportWriter) flush() error {
	if ew.csv != nil {
		if !ew.header {
			ew.header = true
			if err := ew.csv.Write(ew.columns); err != nil {
				return err
			}
		}
		ew.csv.Flush()
		if err := ew.csv.Error(); err != nil {
			return err
		}
	}
	if err := ew.buf.Flush(); err != nil {
		return err
	}
	if f, ok := ew.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// csvCells is rec as CSV cells, each safe to open in a spreadsheet.
func csvCells(rec api.AuditRecord) []string {
	mr, inEffect := "", ""
	if rec.MR != 0 {
		mr = rec.Project + "!" + strconv.FormatInt(rec.MR, 10)
	}
	if rec.InEffectAt != nil {
		inEffect = rec.InEffectAt.UTC().Format(time.RFC3339Nano)
	}
	cells := []string{rec.At.UTC().Format(time.RFC3339Nano), rec.Kind, rec.Actor, rec.Action, rec.Request, rec.Subject, rec.Target, rec.Ticket, rec.Approver, mr, inEffect, rec.Params}
	for i, c := range cells {
		cells[i] = spreadsheetSafe(c)
	}
	return cells
}

// spreadsheetSafe neutralises a cell a spreadsheet would run as a formula (CSV injection): one
// that starts with =, +, -, @ (or a tab or carriage return, which some spreadsheets skip before
// one) is prefixed with a quote, which the spreadsheet shows as text. The CSV writer quotes
// what needs quoting (commas, quotes, line breaks).
func spreadsheetSafe(c string) string {
	if c != "" && strings.ContainsRune("=+-@\t\r", rune(c[0])) {
		return "'" + c
	}
	return c
}
