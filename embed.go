package main

import (
	"bindery/internal/app"
	"bindery/schema"
	"bindery/ui"
)

// assets are the files the binary carries: the SQL migrations and the SPA build. Each lives
// in the package that owns it (so its tests can use it); this is where they are handed down.
var assets = app.Assets{
	Schema: schema.FS,
	UI:     ui.Dist(),
}
