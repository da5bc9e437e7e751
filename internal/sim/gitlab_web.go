package sim

import (
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// The simulated GitLab's web pages: the web_url of an MR or a pipeline (the links bindery shows
// its users) opens a small read-only page instead of a 404.

const webStyle = `body{font:14px system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
code,pre{background:#f4f4f4;padding:.1em .3em;overflow-wrap:anywhere}pre{padding:.6em;overflow:auto}
table{border-collapse:collapse;display:block;overflow-x:auto}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left}
.s{font-weight:bold}
#clear-blocker{font:inherit;min-height:44px;min-width:8em;margin:.5em 0;padding:.5em 1.2em;border:1px solid #999;border-radius:4px;background:#f6f6f6;cursor:pointer}`

// webPolicy is the pages' own content policy, as strict as bindery's (the server's would refuse
// the inline stylesheet): nothing runs, the one stylesheet is allowed by its hash, the form
// posts here only.
var webPolicy = func() string {
	sum := sha256.Sum256([]byte(webStyle))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
}()

var webPage = template.Must(template.New("mr").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{{.Title}} · {{.Site}}</title>
<style>` + webStyle + `</style></head><body>
<p><small>{{.Site}} · {{.Project}}</small></p>
<h1>{{.Title}}</h1>
<table>{{range .Rows}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
{{if .Blocker}}<form method="post" action="/sim/gitlab/blockers/clear"><p>Held at <code id="blocker">{{.Blocker}}</code> until someone clears it.
<input type="hidden" name="project" value="{{.Project}}"><input type="hidden" name="iid" value="{{.IID}}">
<br><button type="submit" id="clear-blocker">Clear the blocker</button></p></form>{{end}}
{{if .Pipelines}}<h2>Pipelines</h2><table><tr><th>id</th><th>sha</th><th>status</th></tr>
{{range .Pipelines}}<tr><td>#{{index . 0}}</td><td><code>{{index . 1}}</code></td><td class="s">{{index . 2}}</td></tr>{{end}}</table>{{end}}
{{if .Files}}<h2>Changes</h2>{{range .Files}}<h3><code>{{index . 0}}</code></h3><pre>{{index . 1}}</pre>{{end}}{{end}}
</body></html>`))

type webView struct {
	Site           string // "" : simulated GitLab
	Project, Title string
	IID            int64
	Blocker        string // what holds the MR, with a button that clears it
	Rows           [][2]string
	Pipelines      [][3]string
	Files          [][2]string
}

// serveWeb serves /sim/gitlab/<project>/-/merge_requests/<iid>, …/-/pipelines/<id> and
// …/-/jobs/<id>.
func (g *GitLab) serveWeb(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/sim/gitlab/")
	projectPath, page, ok := strings.Cut(rest, "/-/")
	kind, idText, _ := strings.Cut(page, "/")
	id, err := strconv.ParseInt(idText, 10, 64)
	if !ok || err != nil || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	g.advance(now)
	p := g.projects[projectPath]
	if p == nil {
		http.NotFound(w, r)
		return
	}
	var v *webView
	switch kind {
	case "merge_requests":
		v = g.mrPage(p, id)
	case "pipelines":
		v = g.pipelinePage(p, id)
	case "jobs":
		v = g.jobPage(p, id)
	}
	if v == nil {
		http.NotFound(w, r)
		return
	}
	writePage(w, v)
}

// writePage answers a simulator's web page under the pages' content policy.
func writePage(w http.ResponseWriter, v *webView) {
	if v.Site == "" {
		v.Site = "simulated GitLab"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", webPolicy)
	_ = webPage.Execute(w, v)
}

func (g *GitLab) mrPage(p *project, iid int64) *webView {
	mr := p.mr(iid)
	if mr == nil {
		return nil
	}
	now := g.clock.Now()
	var approvers []string
	for _, a := range mr.approvals {
		approvers = append(approvers, g.userByID(a.userID).Username)
	}
	v := &webView{Project: p.path, Title: "!" + itoa64(mr.iid) + " " + mr.title, IID: mr.iid, Rows: [][2]string{
		{"state", mr.state},
		{"merge status", g.detailedStatus(mr, now, false)},
		{"branches", mr.source + " → " + mr.target},
		{"head", mr.head()},
		{"approved by", strings.Join(approvers, ", ")},
		{"merge commit", mr.mergeCommit},
		{"merge error", mr.mergeError},
	}}
	if mr.state == "opened" {
		v.Blocker = mr.blocker
	}
	for i := len(p.pipelines) - 1; i >= 0; i-- {
		if pl := p.pipelines[i]; pl.mrIID == mr.iid {
			v.Pipelines = append(v.Pipelines, [3]string{itoa64(pl.id), pl.sha[:8] + " (" + pl.source + ", " + pl.ref + ")", pl.status(now)})
		}
	}
	src, tgt := p.commits[mr.head()], p.commits[p.branches[mr.target]]
	if mr.state == "merged" {
		tgt = nil
		if mc := p.commits[mr.mergeCommit]; mc != nil && len(mc.parents) > 0 {
			tgt = p.commits[mc.parents[0]]
		}
	}
	if src != nil && tgt != nil {
		base := p.commits[p.mergeBase(src.id, tgt.id)]
		if base != nil {
			var paths []string
			for path := range changes(base.files, src.files) {
				paths = append(paths, path)
			}
			sort.Strings(paths)
			for _, path := range paths {
				content, ok := src.files[path]
				text := content.content
				if !ok {
					text = "(deleted)"
				}
				v.Files = append(v.Files, [2]string{path, text})
			}
		}
	}
	return v
}

func (g *GitLab) pipelinePage(p *project, id int64) *webView {
	for _, pl := range p.pipelines {
		if pl.id == id {
			return &webView{Project: p.path, Title: "Pipeline #" + itoa64(pl.id), Rows: [][2]string{
				{"status", pl.status(g.clock.Now())},
				{"merge request", "!" + itoa64(pl.mrIID)},
				{"sha", pl.sha},
				{"ref", pl.ref},
				{"created", pl.createdAt.UTC().Format("2006-01-02 15:04:05 UTC")},
			}}
		}
	}
	return nil
}

func (g *GitLab) jobPage(p *project, id int64) *webView {
	for _, pl := range p.pipelines {
		for i, j := range pl.jobs {
			if j.ID != id {
				continue
			}
			status := pipeFailed // a retried run
			if i == len(pl.jobs)-1 {
				status = pl.status(g.clock.Now())
			}
			return &webView{Project: p.path, Title: "Job #" + itoa64(j.ID) + " test", Rows: [][2]string{
				{"status", status},
				{"stage", "test"},
				{"pipeline", "#" + itoa64(pl.id)},
				{"sha", pl.sha},
				{"started", j.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC")},
			}}
		}
	}
	return nil
}
