package app

import (
	"fmt"
	"os"
	"path/filepath"

	"bindery/internal/platform/config"
)

// PrepareDemo makes the demo data directory: it writes the embedded sample configuration when
// the directory has none (an existing one is kept, with the user's edits) and returns the
// config path and the SQLite DSN. Starting the demo twice on one directory reuses its data.
func PrepareDemo(dataDir string) (configPath, dsn string, err error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", "", fmt.Errorf("demo data directory: %w", err)
	}
	configPath = filepath.Join(dataDir, "config.yaml")
	if _, err := os.Stat(configPath); os.IsNotExist(err) {
		if err := os.WriteFile(configPath, config.Sample, 0o644); err != nil {
			return "", "", fmt.Errorf("write sample config: %w", err)
		}
	} else if err != nil {
		return "", "", err
	}
	abs, err := filepath.Abs(filepath.Join(dataDir, "bindery.db"))
	if err != nil {
		return "", "", err
	}
	return configPath, "sqlite:" + abs, nil
}
