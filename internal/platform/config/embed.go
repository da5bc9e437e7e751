package config

import _ "embed"

// Sample is the annotated sample configuration that `bindery demo` writes when its data
// directory has none.
//
//go:embed sample.yaml
var Sample []byte
