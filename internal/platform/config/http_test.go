package config

func init() {
	probes["identity.loginHeader"] = func(s *Snapshot) any { return s.LoginHeader() }
	probes["identity.directory"] = func(s *Snapshot) any { return len(s.IdentityDirectory().Entries()) }
	probes["authz.opsRule"] = func(s *Snapshot) any { return s.OpsRule() }
	probes["ratelimit.revoke"] = func(s *Snapshot) any { return s.RateLimit("ratelimit.revoke", 10) }
	probes["ratelimit.renew"] = func(s *Snapshot) any { return s.RateLimit("ratelimit.renew", 10) }

	misconfigTable["identity.loginHeader"] = []misconfigCase{ // authentication fails closed
		{"missing", nil, DefaultLoginHeader}, {"blank", nil, DefaultLoginHeader}, {"garbage", str("'X User: me'"), ""},
		{"negative/zero", str("0"), "0"}, {"valid", str("X-Auth-Request-Email"), "X-Auth-Request-Email"},
	}
	misconfigTable["identity.directory"] = []misconfigCase{ // an ambiguous directory is rejected (-1)
		{"missing", nil, 0}, {"blank", nil, 0},
		{"garbage", str(`[{account: alice}]`), -1},
		{"negative/zero", str(`[{account: a@x.io, employeeId: "1"}, {account: b@x.io, employeeId: "1"}]`), -1},
		{"valid", str(`[{account: a@x.io, employeeId: E7, name: a}]`), 1},
	}
	misconfigTable["authz.opsRule"] = []misconfigCase{ // authorization fails closed
		{"missing", nil, "bindery-ops"}, {"blank", nil, ""}, {"garbage", str("'%%%'"), "%%%"},
		{"negative/zero", str("0"), "0"}, {"valid", str("sre-admins"), "sre-admins"},
	}
	misconfigTable["ratelimit.revoke"] = []misconfigCase{ // fail open
		{"missing", nil, 10}, {"blank", nil, 0}, {"garbage", str("many"), 0},
		{"negative/zero", str("-3"), 0}, {"valid", str("4"), 4},
	}
	misconfigTable["ratelimit.renew"] = misconfigTable["ratelimit.revoke"]
}
