package config

import (
	"fmt"
	"strings"
)

// Markdown renders the key registry as the configuration reference (docs/config.md).
func Markdown() string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from internal/platform/config/keys.go by: go test ./internal/platform/config -run TestConfigDocs -update -->

bindery reads one YAML file (` + "`-config FILE`" + `; demo writes ` + "`<data>/config.yaml`" + ` from the embedded
sample). A dotted name is a nested key: ` + "`ratelimit.apply`" + ` is ` + "`ratelimit:`" + ` → ` + "`apply:`" + `.

## How a change takes effect

The file is watched — its directory, so that editors which replace the file (write a new one,
then rename it over the old) are seen too — and re-read every 2 seconds even without an event.
Every successful load builds a new validated snapshot and swaps it in at once; code reads the
snapshot in force at each use, never a copy kept from the start.

- **Dynamic** keys are read at each use and take effect on the next request or step: rate
  limits, the access mode, feature switches, the catalog, secrets, timeouts, schedules, the
  simulators' faults.
- **Static** keys are read once at start: listen addresses, the DSN, pool and worker sizes, the
  log format. Changing one logs "restart needed" and the running value stays. The flags
  ` + "`-addr`" + ` (serve, demo) and ` + "`-dsn`" + ` (demo) override their keys.

## Reloads that keep the last good configuration

A reload that fails keeps the configuration in force whole — never a part of the new file — and
the error is logged, counted in ` + "`bindery_config_reload_errors_total`" + ` and shown in the ops console
until a good file is loaded. A reload fails when the file

- does not parse, or a value of a key that rejects the file is invalid (the table says which);
- holds no keys at all (emptied, or truncated by an editor mid-write; write ` + "`{}`" + ` to reset every key
  to its default);
- looks cut short or half written compared with the configuration in force: it would empty the
  catalog (unless it says ` + "`targets: []`" + `), blank a secret that is set (unless it writes the blank
  out, ` + "`\"\"`" + `), or drop a top-level section the configuration in force has (unless it keeps the
  section's name, ` + "`hooks: {}`" + `).

A file cut in the middle of ` + "`targets:`" + ` is still valid YAML with fewer targets, and loads: replace
the file in one rename ([operations.md](operations.md), 'Changing the configuration file'). A target that leaves the
catalog refuses new applications only; requests already accepted go on with the target as they
were accepted for it, and a reload that removes targets bindings still use is told to operators
(` + "`config.targets_removed`" + `, and the ops console).

Unknown keys are reported (log and ops console) and otherwise ignored. A process that starts with
a file that fails stops with the error: there is no last good configuration yet.

## Defaults follow the lighter consequence

For every key the table says its default and what a blank, unknown or invalid value does, chosen
by which mistake hurts less:

- rate limits fail open: a blank, unparsable or non-positive limit means no limiting;
- feature switches fail off (` + "`workflow.approvalFirst`" + `, ` + "`approval.checklistMode`" + `, …);
- an access-mode typo closes: ` + "`apply.mode`" + ` is ` + "`OPEN`" + ` or ` + "`TEST_WINDOW`" + ` (read case- and
  space-insensitively; missing or blank is ` + "`TEST_WINDOW`" + `), anything else is ` + "`CLOSED`" + `;
  ` + "`TEST_WINDOW`" + ` opens only inside ` + "`apply.window`" + ` in the zone ` + "`apply.timezone`" + `, never the host's zone,
  and an invalid window opens nothing;
- authorization fails closed: a blank ops rule makes nobody an operator, a blank callback secret
  or token refuses every call it guards;
- a timeout is never zero: a blank or invalid one is its default, so no call runs without one.

## Signing in

One way of signing people in per deployment, chosen here, each failing closed (the protocol and
the answers are in docs/api.md, 'Who may call'):

- **A login proxy** in front of bindery (the default): ` + "`identity.loginHeader`" + `, believed only from
  ` + "`server.trustedProxies`" + `, resolved through ` + "`identity.directory`" + `. An invalid header name reads
  no header: every request is 401.
- **OpenID Connect**, with ` + "`identity.oidc.issuer`" + ` set: bindery sends people to the provider
  (` + "`identity.oidc.clientID`" + `, ` + "`clientSecret`" + `, ` + "`scopes`" + `; the redirect URL is ` + "`server.publicURL`" + ` +
  ` + "`/auth/callback`" + `), names them by ` + "`identity.oidc.accountClaim`" + ` and keeps their groups
  (` + "`identity.oidc.groupsClaim`" + `, for ` + "`permission.rules`" + `' ` + "`group:NAME`" + `); the session lives in the
  database for ` + "`identity.session.idle`" + ` unused, ` + "`identity.session.absolute`" + ` in all. The login header
  is not read, nor, in the demo, the user switcher. A provider that cannot be reached stops only
  sign-in; a blank client id lets nobody sign in.

Personal API tokens for scripts work with either; they need no key (a person makes them on the
Settings page). Refused credentials — an unknown, revoked or expired token, a session cookie
that names nobody — are limited per client address by ` + "`ratelimit.authFailures`" + `.

## Keys at a glance

| key | type | default | kind | what a blank, unknown or invalid value does |
|---|---|---|---|---|
`)
	for _, k := range Keys {
		kind := "dynamic"
		if k.Static {
			kind = "static"
		}
		if k.Secret {
			kind += ", secret"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Name, esc(k.Type), esc(k.Default), kind, esc(k.Misconfig))
	}
	b.WriteString("\n## Keys\n")
	for _, k := range Keys {
		fmt.Fprintf(&b, "\n### `%s`\n\n%s\n", k.Name, k.Doc)
	}
	return b.String()
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
