// Package bundle builds the SPA from ui/src into the files of ui/dist with esbuild's Go API, so
// a fresh clone builds without Node. The output is deterministic (same source, same bytes), its
// asset names carry a content hash (the server caches those for a year), and index.html — the
// one file that names the hashes — is the only file that changes name-stably between releases.
package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// Files maps a path relative to dist (slash-separated) to its content.
type Files map[string][]byte

// Build bundles uiDir/src (entry main.js, pages loaded on demand as split chunks), minifies the
// recovery script into a hashed asset of its own (a classic script: it must run before the
// module loads, and the content policy allows no inline script), and renders
// uiDir/src/index.html with the hashed names filled in.
func Build(uiDir string) (Files, error) {
	abs, err := filepath.Abs(uiDir)
	if err != nil {
		return nil, err
	}
	res := api.Build(api.BuildOptions{
		AbsWorkingDir:     abs,
		EntryPoints:       []string{"src/main.js"},
		Bundle:            true,
		Splitting:         true, // pages are dynamic imports: a release can remove a chunk an open page still needs
		Format:            api.FormatESModule,
		Target:            api.ES2020,
		Outdir:            filepath.Join(abs, "dist"),
		EntryNames:        "assets/app-[hash]",
		ChunkNames:        "assets/[name]-[hash]",
		AssetNames:        "assets/[name]-[hash]",
		MinifyWhitespace:  true,
		MinifySyntax:      true,
		MinifyIdentifiers: true,
		LegalComments:     api.LegalCommentsNone,
		Charset:           api.CharsetUTF8,
		Metafile:          true,
		Write:             false,
		LogLevel:          api.LogLevelSilent,
	})
	if err := messages("bundle", res.Errors); err != nil {
		return nil, err
	}
	out := Files{}
	for _, f := range res.OutputFiles {
		rel, err := filepath.Rel(filepath.Join(abs, "dist"), f.Path)
		if err != nil {
			return nil, err
		}
		out[filepath.ToSlash(rel)] = f.Contents
	}
	js, css, err := entryOutputs(res.Metafile)
	if err != nil {
		return nil, err
	}
	recovery, err := os.ReadFile(filepath.Join(abs, "src", "recovery.js"))
	if err != nil {
		return nil, err
	}
	min := api.Transform(string(recovery), api.TransformOptions{
		MinifyWhitespace: true, MinifySyntax: true, MinifyIdentifiers: true, Target: api.ES2017,
		LegalComments: api.LegalCommentsNone, Charset: api.CharsetUTF8,
	})
	if err := messages("recovery.js", min.Errors); err != nil {
		return nil, err
	}
	// esbuild names its outputs the same way: a content hash, so the name never changes meaning.
	sum := sha256.Sum256(min.Code)
	recoveryName := "assets/recovery-" + base32.StdEncoding.EncodeToString(sum[:])[:8] + ".js"
	out[recoveryName] = min.Code
	page, err := os.ReadFile(filepath.Join(abs, "src", "index.html"))
	if err != nil {
		return nil, err
	}
	html := string(page)
	for placeholder, value := range map[string]string{
		"{{recovery}}": "/" + recoveryName,
		"{{css}}":      "/" + css,
		"{{js}}":       "/" + js,
	} {
		if !strings.Contains(html, placeholder) {
			return nil, fmt.Errorf("src/index.html lacks %s", placeholder)
		}
		html = strings.ReplaceAll(html, placeholder, value)
	}
	out["index.html"] = []byte(html)
	return out, nil
}

// entryOutputs finds the hashed names of the entry script and its stylesheet in esbuild's
// metafile (paths there are relative to the working directory: dist/assets/app-XXXX.js).
func entryOutputs(metafile string) (js, css string, err error) {
	var meta struct {
		Outputs map[string]struct {
			EntryPoint string `json:"entryPoint"`
			CSSBundle  string `json:"cssBundle"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(metafile), &meta); err != nil {
		return "", "", fmt.Errorf("metafile: %w", err)
	}
	for name, o := range meta.Outputs {
		if o.EntryPoint == "src/main.js" {
			js, css = strings.TrimPrefix(name, "dist/"), strings.TrimPrefix(o.CSSBundle, "dist/")
		}
	}
	if js == "" || css == "" {
		return "", "", errors.New("metafile names no entry script and stylesheet (does src/main.js import style.css?)")
	}
	return js, css, nil
}

func messages(what string, msgs []api.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	var b strings.Builder
	for _, m := range msgs {
		if m.Location != nil {
			fmt.Fprintf(&b, "\n%s:%d:%d: %s", m.Location.File, m.Location.Line, m.Location.Column, m.Text)
		} else {
			fmt.Fprintf(&b, "\n%s", m.Text)
		}
	}
	return fmt.Errorf("%s failed:%s", what, b.String())
}

// Write makes distDir hold exactly files: stale assets of earlier builds are removed.
func Write(distDir string, files Files) error {
	if err := os.RemoveAll(filepath.Join(distDir, "assets")); err != nil {
		return err
	}
	for name, data := range files {
		p := filepath.Join(distDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Diff lists how distDir differs from files: changed, missing and extra paths, sorted. Empty
// means the committed bundle is what the source builds to.
func Diff(distDir string, files Files) ([]string, error) {
	var diffs []string
	seen := map[string]bool{}
	err := filepath.WalkDir(distDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(distDir, p)
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		want, ok := files[rel]
		if !ok {
			diffs = append(diffs, "extra:   "+rel)
			return nil
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			diffs = append(diffs, "changed: "+rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for name := range files {
		if !seen[name] {
			diffs = append(diffs, "missing: "+name)
		}
	}
	sort.Strings(diffs)
	return diffs, nil
}
