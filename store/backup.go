package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrBackupMySQL: bindery backup copies SQLite databases; a MySQL database is copied with the
// server's own tools (docs/install.md, 'Backup and restore').
var ErrBackupMySQL = errors.New("bindery backup copies a SQLite database; back up MySQL or MariaDB with " +
	"mysqldump --single-transaction --routines --triggers DATABASE > bindery.sql (a consistent online copy of InnoDB tables) " +
	"or a snapshot of the server's volume (docs/install.md, 'Backup and restore')")

// Backup writes a consistent copy of a SQLite database to out while bindery runs: VACUUM INTO
// reads one snapshot of the database (a read transaction, which in WAL mode never blocks the
// writer nor waits for it) and writes it as a new, compact database file. The copy holds every
// transaction committed before it started and none after. out must not exist; the copy is
// written beside it and renamed into place, so a failed or interrupted backup leaves no
// partial file under that name.
func (db *DB) Backup(ctx context.Context, out string) error {
	if db.dialect != SQLite {
		return ErrBackupMySQL
	}
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("backup: %s exists: choose a new file", out)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".partial-*")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	os.Remove(tmpName) // VACUUM INTO wants to create the file itself
	defer os.Remove(tmpName)
	if _, err := db.ro.ExecContext(ctx, "VACUUM INTO ?", tmpName); err != nil {
		return fmt.Errorf("backup: VACUUM INTO: %w", translate(err))
	}
	if err := syncFile(tmpName); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := os.Rename(tmpName, out); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

func syncFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
