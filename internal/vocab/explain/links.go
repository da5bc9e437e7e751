package explain

import (
	"fmt"
	"net/url"
	"strconv"

	"bindery/api"
)

// Links makes the web addresses people follow from what bindery tells them: a request's page,
// the ops console, a project's merge request or pipeline in GitLab. Base is bindery's own web
// address; GitLab its web base ("": numbers without an address).
type Links struct {
	Base, GitLab string
}

// Request is the page of request operationID.
func (l Links) Request(operationID string) string {
	return l.Base + "/requests/" + url.PathEscape(operationID)
}

// Review is an access review's page.
func (l Links) Review(id int64) string { return l.Base + "/reviews/" + strconv.FormatInt(id, 10) }

// Ops is the ops console.
func (l Links) Ops() string { return l.Base + "/ops" }

// MR is merge request iid of project (nil without a number).
func (l Links) MR(project string, iid int64) *api.Link {
	return l.gitlab(project, "merge_requests", iid)
}

// Pipeline is pipeline id of project (nil without a number).
func (l Links) Pipeline(project string, id int64) *api.Link {
	return l.gitlab(project, "pipelines", id)
}

func (l Links) gitlab(project, kind string, id int64) *api.Link {
	if id == 0 {
		return nil
	}
	if l.GitLab == "" {
		return &api.Link{ID: id}
	}
	return &api.Link{ID: id, URL: fmt.Sprintf("%s/%s/-/%s/%d", l.GitLab, project, kind, id)}
}

// Of is Told's link maker for project: the address of its merge request ("mr") or pipeline
// ("pipeline") by number ("": none).
func (l Links) Of(project string) func(kind string, id int64) string {
	return func(kind string, id int64) string {
		var k *api.Link
		switch kind {
		case "mr":
			k = l.MR(project, id)
		case "pipeline":
			k = l.Pipeline(project, id)
		}
		if k == nil {
			return ""
		}
		return k.URL
	}
}
