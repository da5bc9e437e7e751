package config

import (
	"fmt"
	"strings"
)

// Markdown renders the key registry as the configuration reference (docs/config.md).
func Markdown() string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from config/keys.go by: go test ./config -run TestConfigDocs -update -->

bindery reads one YAML file (` + "`-config FILE`" + `; demo writes ` + "`<data>/config.yaml`" + ` from the embedded
sample). A dotted name is a nested key: ` + "`ratelimit.apply`" + ` is ` + "`ratelimit:`" + ` → ` + "`apply:`" + `.

The file is watched. **Dynamic** keys are read at each use and take effect on the next request or
step. **Static** keys are read at start; changing one logs "restart needed". A file that fails to
parse or validate, or holds no keys at all (emptied, or truncated by an editor mid-write; write
` + "`{}`" + ` to reset every key to its default), keeps the last good configuration in force; the error is
logged, counted in
` + "`bindery_config_reload_errors_total`" + ` and shown in the ops console until a good file is loaded.
Unknown keys are reported (log and ops console) and otherwise ignored.

Defaults follow the lighter consequence of a mistake: rate limits fail open, feature switches
fail off, an access-mode typo closes, authorization fails closed.

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
