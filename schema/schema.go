// Package schema holds bindery's SQL migrations, one numbered file per step and dialect
// (mysql/NNNN_name.sql, sqlite/NNNN_name.sql), embedded into the binary. Both dialects keep the
// same version numbers so that a test can check they move together.
package schema

import "embed"

// FS holds mysql/*.sql and sqlite/*.sql.
//
//go:embed mysql/*.sql sqlite/*.sql
var FS embed.FS
