// Package ui embeds the single-page application's build output (dist/).
package ui

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// Dist is the SPA build with index.html at its root.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed directive guarantees dist exists
	}
	return sub
}
