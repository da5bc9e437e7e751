package config

import "time"

// Webhook secrets: who may call /hooks/*. Shared by the receivers (package server) and, in demo
// mode, by the simulators that send the callbacks.

type hookSettings struct {
	approvalSecret string
	approvalSkew   time.Duration
	deployToken    string
	gitlabToken    string
}

func init() {
	register(
		Key{
			Name: "hooks.approvalSecret", Type: "string", Default: "(none)", Secret: true,
			Doc:       "Shared secret of the approval system's callbacks (HMAC-SHA256 over timestamp + \".\" + body, headers X-Bindery-Timestamp and X-Bindery-Signature).",
			Misconfig: "missing/blank → every approval callback is refused with 401 (authentication fails closed).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				s.approvalSecret, _ = stringOr(v, "")
				return s.approvalSecret, blankNote(v), nil
			},
		},
		Key{
			Name: "hooks.approvalSkew", Type: "duration", Default: "5m",
			Doc:       "Largest accepted difference between an approval callback's timestamp and the clock.",
			Misconfig: "blank, unparsable or ≤ 0 → 5m.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.approvalSkew, note = durationOr(v, 5*time.Minute)
				return s.approvalSkew.String(), note, nil
			},
		},
		Key{
			Name: "hooks.deployToken", Type: "string", Default: "(none)", Secret: true,
			Doc:       "Token the deploy pipeline sends as \"Authorization: Bearer <token>\" on POST /hooks/deploy.",
			Misconfig: "missing/blank → every deploy callback is refused with 401; reconciliation still validates merged requests.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				s.deployToken, _ = stringOr(v, "")
				return s.deployToken, blankNote(v), nil
			},
		},
		Key{
			Name: "hooks.gitlabToken", Type: "string", Default: "(none)", Secret: true,
			Doc:       "Secret GitLab sends in X-Gitlab-Token on POST /hooks/gitlab (compared in constant time).",
			Misconfig: "missing/blank → every GitLab webhook is refused with 401; polling still drives the workflow.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				s.gitlabToken, _ = stringOr(v, "")
				return s.gitlabToken, blankNote(v), nil
			},
		},
	)
}

// blankNote reports a key written but left blank, which for a secret disables what it guards.
func blankNote(v value) string {
	if v.present && v.blank() {
		return "blank: the endpoint it guards refuses every call"
	}
	return ""
}

// ApprovalSecret is hooks.approvalSecret. Default none; missing/blank → every approval
// callback is refused (401).
func (s *Snapshot) ApprovalSecret() []byte { return []byte(s.approvalSecret) }

// ApprovalSkew is hooks.approvalSkew. Default 5m; blank/garbage/≤0 → 5m.
func (s *Snapshot) ApprovalSkew() time.Duration { return s.approvalSkew }

// DeployToken is hooks.deployToken. Default none; missing/blank → every deploy callback is
// refused (401).
func (s *Snapshot) DeployToken() string { return s.deployToken }

// GitLabHookToken is hooks.gitlabToken. Default none; missing/blank → every GitLab webhook is
// refused (401).
func (s *Snapshot) GitLabHookToken() string { return s.gitlabToken }
