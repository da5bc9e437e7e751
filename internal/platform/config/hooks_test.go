package config

import "time"

func init() {
	probes["hooks.approvalSecret"] = func(s *Snapshot) any { return string(s.ApprovalSecret()) }
	probes["hooks.approvalSkew"] = func(s *Snapshot) any { return s.ApprovalSkew() }
	probes["hooks.deployToken"] = func(s *Snapshot) any { return s.DeployToken() }
	probes["hooks.gitlabToken"] = func(s *Snapshot) any { return s.GitLabHookToken() }
	probes["server.metricsToken"] = func(s *Snapshot) any { return s.MetricsToken() }
	// Secrets fail closed: anything but a real value leaves the hook refusing every call (""),
	// and a garbage-looking value is still a value (it is what the sender must present).
	for _, k := range []string{"hooks.approvalSecret", "hooks.deployToken", "hooks.gitlabToken", "server.metricsToken"} {
		misconfigTable[k] = []misconfigCase{
			{"missing", nil, ""}, {"blank", nil, ""}, {"garbage", str("'%%%'"), "%%%"},
			{"negative/zero", str("0"), "0"}, {"valid", str("s3cret"), "s3cret"},
		}
	}
	misconfigTable["hooks.approvalSkew"] = []misconfigCase{
		{"missing", nil, 5 * time.Minute}, {"blank", nil, 5 * time.Minute}, {"garbage", str("a while"), 5 * time.Minute},
		{"negative/zero", str("-1m"), 5 * time.Minute}, {"valid", str("30s"), 30 * time.Second},
	}
}
