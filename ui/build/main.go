// Command build bundles the SPA (ui/src → ui/dist) without Node:
//
//	go run ./ui/build          # rebuild ui/dist (commit the result)
//	go run ./ui/build -check   # exit 1 when ui/dist is not what ui/src builds to (CI)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"bindery/ui/bundle"
)

func main() {
	dir := flag.String("dir", "ui", "the ui directory (src/ in, dist/ out)")
	check := flag.Bool("check", false, "compare with the committed dist instead of writing it")
	flag.Parse()
	files, err := bundle.Build(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dist := filepath.Join(*dir, "dist")
	if *check {
		diffs, err := bundle.Diff(dist, files)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if len(diffs) > 0 {
			fmt.Fprintf(os.Stderr, "ui/dist is not what ui/src builds to; run `go run ./ui/build` and commit:\n")
			for _, d := range diffs {
				fmt.Fprintln(os.Stderr, "  "+d)
			}
			os.Exit(1)
		}
		fmt.Printf("ui/dist is up to date (%d files)\n", len(files))
		return
	}
	if err := bundle.Write(dist, files); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("wrote %d files to %s\n", len(files), dist)
}
