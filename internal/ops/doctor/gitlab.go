package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go/v2"
	"golang.org/x/time/rate"
)

// The GitLab side (docs/install.md, 'GitLab'): every call here is a GET.

// account is a token's owner as GitLab reports it.
type account struct {
	role   string // "bot", "reviewer 1", …
	token  string
	client *gl.Client
	user   *gl.User
}

func (d *doctor) checkGitLab(ctx context.Context) {
	base := d.snap.GitLabBaseURL()
	if base == "" {
		d.fail("gitlab", "gitlab.baseURL is not set", "set it to your GitLab's URL (https://gitlab.example.com)")
		return
	}
	if !d.checkGitLabTLS(ctx, base) {
		return
	}
	bot := d.checkToken(ctx, base, "bot", d.snap.GitLabBotToken(), "gitlab.botToken")
	var reviewers []*account
	for i, t := range d.snap.GitLabReviewerTokens() {
		role := fmt.Sprintf("reviewer %d", i+1)
		if r := d.checkToken(ctx, base, role, t, fmt.Sprintf("gitlab.reviewerTokens[%d]", i)); r != nil {
			reviewers = append(reviewers, r)
		}
	}
	if len(d.snap.GitLabReviewerTokens()) == 0 {
		d.fail("gitlab: reviewer tokens", "gitlab.reviewerTokens is empty", "create one account per approval the target projects require, each with a token of scope api")
	}
	d.checkDistinct(bot, reviewers)
	if bot == nil {
		return // every project check reads as the bot
	}
	seen := map[string]bool{}
	for _, t := range d.snap.Targets() {
		key := t.Project + "\x00" + t.Branch
		if seen[key] {
			continue
		}
		seen[key] = true
		d.checkProject(ctx, bot, reviewers, t.Project, t.Branch)
	}
	if len(seen) == 0 {
		d.warn("gitlab: targets", "the catalog (targets) is empty", "add the targets people may apply for (docs/config.md, 'targets')")
	}
}

// checkGitLabTLS connects to GitLab's host: the certificate must verify (an https URL), and a
// plain http URL is a warning — the tokens travel in clear.
func (d *doctor) checkGitLabTLS(ctx context.Context, base string) bool {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		d.fail("gitlab: reachable", fmt.Sprintf("gitlab.baseURL %q is not a URL", base), "set it to https://gitlab.example.com")
		return false
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	if u.Scheme == "http" {
		conn, err := (&net.Dialer{}).DialContext(cctx, "tcp", host)
		if err != nil {
			d.fail("gitlab: reachable", hint(err), "check gitlab.baseURL and that this host may reach it (firewall, proxy)")
			return false
		}
		conn.Close()
		d.warn("gitlab: TLS", base+" is plain http: the tokens travel in clear", "use GitLab's https URL")
		return true
	}
	conn, err := (&tls.Dialer{Config: &tls.Config{ServerName: u.Hostname()}}).DialContext(cctx, "tcp", host)
	if err != nil {
		d.fail("gitlab: TLS", hint(err), "GitLab's certificate must verify from this host: install its CA in the system's trust store (or SSL_CERT_FILE)")
		return false
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	left := time.Until(certs[0].NotAfter)
	detail := fmt.Sprintf("certificate for %s verified, valid for %d more days", u.Hostname(), int(left.Hours()/24))
	if left < 14*24*time.Hour {
		d.warn("gitlab: TLS", detail, "renew GitLab's certificate")
	} else {
		d.ok("gitlab: TLS", detail)
	}
	return true
}

func (d *doctor) client(base, token string) (*gl.Client, error) {
	return gl.NewClient(token, gl.WithBaseURL(base), gl.WithHTTPClient(d.hc), gl.WithoutRetries(),
		gl.WithCustomLimiter(rate.NewLimiter(rate.Inf, 0)), gl.WithURLWarningLogger(slog.New(slog.DiscardHandler)),
		gl.WithUserAgent("bindery-doctor"))
}

// checkToken checks a token is valid (GET /user), has scope api and does not expire within two
// weeks (GET /personal_access_tokens/self).
func (d *doctor) checkToken(ctx context.Context, base, role, token, key string) *account {
	check := "gitlab: " + role + " token"
	if token == "" {
		d.fail(check, key+" is not set", "create a personal access token of scope api for the "+role+" account and set "+key)
		return nil
	}
	c, err := d.client(base, token)
	if err != nil {
		d.fail(check, hint(err), "check gitlab.baseURL")
		return nil
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	u, _, err := c.Users.CurrentUser(gl.WithContext(cctx))
	if err != nil {
		if status(err) == http.StatusUnauthorized {
			d.fail(check, key+" is refused by GitLab (401): revoked, expired or mistyped", "create a new token of scope api for the "+role+" account and set "+key)
		} else {
			d.fail(check, "GET /user: "+hint(err), "check gitlab.baseURL and that GitLab answers from this host")
		}
		return nil
	}
	a := &account{role: role, token: token, client: c, user: u}
	pat, _, err := c.PersonalAccessTokens.GetSinglePersonalAccessToken(gl.WithContext(cctx))
	if err != nil {
		d.warn(check, fmt.Sprintf("valid (user %s), but its scopes cannot be read (%s)", u.Username, hint(err)),
			"make sure it is a personal access token of scope api")
		return a
	}
	if !slices.Contains(pat.Scopes, "api") {
		d.fail(check, fmt.Sprintf("user %s, scopes %v: without api it cannot write", u.Username, pat.Scopes),
			"create a token of scope api for "+u.Username+" and set "+key)
		return a
	}
	detail := fmt.Sprintf("user %s, scopes %v", u.Username, pat.Scopes)
	if pat.ExpiresAt != nil {
		left := time.Until(time.Time(*pat.ExpiresAt))
		detail += fmt.Sprintf(", expires %s", time.Time(*pat.ExpiresAt).Format("2006-01-02"))
		if left < 14*24*time.Hour {
			d.warn(check, detail, "rotate it before it expires: a new token in "+key+" applies without a restart")
			return a
		}
	}
	d.ok(check, detail)
	return a
}

// checkDistinct: a reviewer that is the bot (or another reviewer) adds no approval GitLab counts.
func (d *doctor) checkDistinct(bot *account, reviewers []*account) {
	seen := map[int64]string{}
	if bot != nil {
		seen[bot.user.ID] = "the bot"
	}
	clash := false
	for _, r := range reviewers {
		if other, dup := seen[r.user.ID]; dup {
			clash = true
			d.fail("gitlab: "+r.role, fmt.Sprintf("is %s, the same account as %s", r.user.Username, other),
				"each reviewer token must belong to its own account, none the bot's: GitLab counts one approval per account and never the author's")
			continue
		}
		seen[r.user.ID] = r.role
	}
	if !clash && bot != nil && len(reviewers) > 0 {
		d.ok("gitlab: accounts", fmt.Sprintf("bot %s and %d reviewer account(s), all distinct", bot.user.Username, len(reviewers)))
	}
}

// checkProject checks one catalog project and branch as the bot sees them.
func (d *doctor) checkProject(ctx context.Context, bot *account, reviewers []*account, project, branch string) {
	check := "gitlab: " + project
	cctx, cancel := d.call(ctx)
	defer cancel()
	p, _, err := bot.client.Projects.GetProject(project, nil, gl.WithContext(cctx))
	if err != nil {
		if status(err) == http.StatusNotFound {
			d.fail(check, "not found (or the bot is not a member)", "create the project, or add "+bot.user.Username+" to it as Maintainer")
		} else {
			d.fail(check, "GET project: "+hint(err), "")
		}
		return
	}
	if _, _, err := bot.client.Branches.GetBranch(project, branch, gl.WithContext(cctx)); err != nil {
		d.fail(check+" branch "+branch, "not found: "+hint(err), "create branch "+branch+" or fix the target's branch in the catalog")
		return
	}
	level := d.memberLevel(cctx, bot, p.ID, bot.user.ID)
	if level < gl.DeveloperPermissions {
		d.fail(check+": bot role", fmt.Sprintf("%s is %s", bot.user.Username, roleName(level)),
			"add "+bot.user.Username+" to the project as Maintainer (it pushes branches and merges)")
	} else {
		d.ok(check+": bot role", fmt.Sprintf("%s is %s", bot.user.Username, roleName(level)))
	}
	for _, r := range reviewers {
		if l := d.memberLevel(cctx, bot, p.ID, r.user.ID); l < gl.DeveloperPermissions {
			d.fail(check+": "+r.role+" role", fmt.Sprintf("%s is %s: it cannot approve", r.user.Username, roleName(l)),
				"add "+r.user.Username+" to the project as Developer (or an eligible approver)")
		}
	}
	others := d.checkProtection(cctx, bot, p.ID, check, branch, level)
	d.checkPipelines(cctx, bot, p, check, branch)
	d.checkMergeMethod(p, check, branch, others)
	d.checkHook(cctx, bot, p.ID, check)
}

func (d *doctor) memberLevel(ctx context.Context, bot *account, project, user int64) gl.AccessLevelValue {
	m, _, err := bot.client.ProjectMembers.GetInheritedProjectMember(project, user, gl.WithContext(ctx))
	if err != nil {
		return gl.NoPermissions
	}
	return m.AccessLevel
}

func roleName(l gl.AccessLevelValue) string {
	switch {
	case l >= gl.OwnerPermissions:
		return "Owner"
	case l >= gl.MaintainerPermissions:
		return "Maintainer"
	case l >= gl.DeveloperPermissions:
		return "Developer"
	case l >= gl.ReporterPermissions:
		return "Reporter"
	case l > gl.NoPermissions:
		return "Guest"
	}
	return "not a member"
}

// checkProtection checks the bot may merge into branch as it is protected, and returns how
// others than the bot may write to the branch while bindery merges (none: only the bot).
func (d *doctor) checkProtection(ctx context.Context, bot *account, project int64, check, branch string, level gl.AccessLevelValue) []string {
	pb, _, err := bot.client.ProtectedBranches.GetProtectedBranch(project, branch, gl.WithContext(ctx))
	if status(err) == http.StatusNotFound {
		d.warn(check+": branch "+branch, "not protected: any Developer may push to it and merge into it",
			"protect it: push No one, merge Maintainers (docs/install.md, 'The GitLab projects')")
		return []string{"it is not protected"}
	}
	if err != nil {
		d.fail(check+": branch "+branch, "GET protected branch: "+hint(err), "")
		return []string{"its protection could not be read"}
	}
	if !allowed(pb.MergeAccessLevels, bot.user.ID, level) {
		d.fail(check+": branch "+branch, fmt.Sprintf("protected, and %s (%s) may not merge into it", bot.user.Username, roleName(level)),
			"allow Maintainers (or the bot by name) to merge into "+branch+", and make the bot a Maintainer")
	} else {
		d.ok(check+": branch "+branch, "protected; the bot may merge into it")
	}
	var others []string
	if who := besidesTheBot(pb.PushAccessLevels, bot.user.ID); len(who) > 0 {
		others = append(others, strings.Join(who, ", ")+" may push")
	}
	if pb.AllowForcePush {
		// GitLab lets those who may push force-push: even with push No one it is one setting
		// away from rewriting the branch under a merge.
		others = append(others, "force pushes are allowed")
	}
	if who := besidesTheBot(pb.MergeAccessLevels, bot.user.ID); len(who) > 0 {
		others = append(others, strings.Join(who, ", ")+" may merge")
	}
	return others
}

// besidesTheBot names the entries of a protected branch's access list that admit anyone but the
// bot: a role (every member of it, the bot's fellow Maintainers too), a group, a deploy key,
// another user. No one (access level 0) and the bot by name admit nobody else.
func besidesTheBot(levels []*gl.BranchAccessDescription, bot int64) []string {
	var out []string
	for _, a := range levels {
		name := a.AccessLevelDescription
		switch {
		case a.UserID == bot && bot != 0:
			continue
		case a.UserID != 0 && name == "":
			name = fmt.Sprintf("user %d", a.UserID)
		case a.GroupID != 0 && name == "":
			name = fmt.Sprintf("group %d", a.GroupID)
		case a.DeployKeyID != 0 && name == "":
			name = fmt.Sprintf("deploy key %d", a.DeployKeyID)
		case a.UserID == 0 && a.GroupID == 0 && a.DeployKeyID == 0 && a.AccessLevel == gl.NoPermissions:
			continue
		case name == "":
			name = roleName(a.AccessLevel) + "s"
		}
		out = append(out, name)
	}
	return out
}

func allowed(levels []*gl.BranchAccessDescription, user int64, level gl.AccessLevelValue) bool {
	for _, a := range levels {
		switch {
		case a.UserID != 0:
			if a.UserID == user {
				return true
			}
		case a.GroupID != 0 || a.DeployKeyID != 0:
		case a.AccessLevel != gl.NoPermissions && level >= a.AccessLevel:
			return true
		}
	}
	return false
}

// checkPipelines: bindery merges a batch only after its pipeline passes, so the project must run
// CI for merge requests: jobs enabled and a CI file on the branch.
func (d *doctor) checkPipelines(ctx context.Context, bot *account, p *gl.Project, check, branch string) {
	if p.BuildsAccessLevel == gl.DisabledAccessControl || (p.BuildsAccessLevel == "" && !p.JobsEnabled) {
		d.fail(check+": pipelines", "CI/CD is disabled", "enable CI/CD in the project's settings: bindery merges a batch only after its pipeline passes")
		return
	}
	file := p.CIConfigPath
	if file == "" {
		file = ".gitlab-ci.yml"
	}
	if strings.Contains(file, "@") || strings.Contains(file, "://") {
		d.ok(check+": pipelines", "CI configuration from "+file)
		return
	}
	if _, _, err := bot.client.RepositoryFiles.GetRawFile(p.ID, file, &gl.GetRawFileOptions{Ref: gl.Ptr(branch)}, gl.WithContext(ctx)); err != nil {
		d.fail(check+": pipelines", fmt.Sprintf("no %s on %s", file, branch),
			"add a CI configuration that tests merge requests and calls bindery's deploy callback (deploy/gitlab/bindery-deploy.gitlab-ci.yml)")
		return
	}
	d.ok(check+": pipelines", file+" on "+branch)
}

// checkMergeMethod: with merge commits, a commit that lands on the target while a batch merges
// — pushed, force-pushed, or a person merging an MR — is merged beside the tested tree
// (docs/gitlab.md states the guarantee of each method). others is how anyone but the bot may
// write to the branch.
func (d *doctor) checkMergeMethod(p *gl.Project, check, branch string, others []string) {
	method := string(p.MergeMethod)
	switch {
	case method == "merge" && len(others) > 0:
		d.warn(check+": merge method", "merge commits, and others may write to "+branch+" ("+strings.Join(others, "; ")+
			"): a commit that lands there while bindery merges — a push, or a person merging an MR — is merged beside the tree bindery tested",
			"let only the bot write to "+branch+" (push No one, merge the bot alone, no force push), or use merge method rebase_merge or ff (docs/gitlab.md)")
	case method == "":
		d.warn(check+": merge method", "not reported by GitLab", "")
	default:
		d.ok(check+": merge method", method)
	}
}

// checkHook finds the webhook that tells bindery about merge requests and pipelines. Its secret
// token cannot be read back from GitLab: a wrong one shows as 401 answers in the hook's log.
func (d *doctor) checkHook(ctx context.Context, bot *account, project int64, check string) {
	want := strings.TrimRight(d.snap.PublicURL(), "/") + "/hooks/gitlab"
	add := fmt.Sprintf("add a project webhook: URL %s, secret token = hooks.gitlabToken, trigger Merge request events and Pipeline events (docs/install.md, 'The webhook')", want)
	hooks, _, err := bot.client.Projects.ListProjectHooks(project, nil, gl.WithContext(ctx))
	if err != nil {
		if status(err) == http.StatusForbidden {
			d.warn(check+": webhook", "the bot may not read the project's webhooks (it needs Maintainer)", "make sure one exists: "+add)
			return
		}
		d.fail(check+": webhook", "GET hooks: "+hint(err), "")
		return
	}
	for _, h := range hooks {
		if strings.TrimRight(h.URL, "/") != want {
			continue
		}
		var missing []string
		if !h.MergeRequestsEvents {
			missing = append(missing, "Merge request events")
		}
		if !h.PipelineEvents {
			missing = append(missing, "Pipeline events")
		}
		if len(missing) > 0 {
			d.fail(check+": webhook", want+" lacks "+strings.Join(missing, " and "), "edit the webhook and tick "+strings.Join(missing, " and "))
			return
		}
		if h.AlertStatus == "disabled" || h.AlertStatus == "temporarily_disabled" {
			d.fail(check+": webhook", want+" is "+string(h.AlertStatus)+" by GitLab after failed deliveries", "fix what failed (its log in GitLab), then re-enable it with a test delivery")
			return
		}
		d.ok(check+": webhook", want+" (merge request and pipeline events; its secret is not readable through the API)")
		return
	}
	d.fail(check+": webhook", "no webhook to "+want, add)
}

// status is the HTTP status of a client-go error (0: none). A 404 comes as client-go's
// ErrNotFound, which carries its status without a response.
func status(err error) int {
	var er *gl.ErrorResponse
	switch {
	case !errors.As(err, &er):
		return 0
	case er.StatusCode != 0:
		return er.StatusCode
	case er.Response != nil:
		return er.Response.StatusCode
	}
	return 0
}
