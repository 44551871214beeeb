package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/btk-project/btk/internal/store/sqlite"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

func newBackupCmd(f *factory) *cobra.Command {
	// Its own viper: --db here must not take over serve's binding of "db".
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Copy the SQLite database consistently, while btk serve runs",
		Long: `Write a consistent copy of the SQLite database to FILE, also while btk serve
runs on it and writes. The copy is made with SQLite's VACUUM INTO from a
read-only connection (it does not wait for the server's lock), has mode 0600
(it holds password hashes), and is compact. FILE must not exist unless --force
is given; it is written under a temporary name and renamed when complete.

The database is --db, BTK_DB or the config file's db, as for btk serve. To
restore, stop btk serve, put the copy in place of the database file (and
remove any -wal and -shm files beside it), and start btk serve on it. For
PostgreSQL, use pg_dump and pg_restore.`,
		Example: `  btk backup /var/backups/btk-$(date +%F).db --db /var/lib/btk/btk.db
  BTK_DB=/var/lib/btk/btk.db btk backup --force /var/backups/btk-latest.db`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := configPath(cmd, f.getenv)
			if err != nil {
				return err
			}
			if err := readConfig(v, path); err != nil {
				return err
			}
			db := v.GetString("db")
			if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
				return errors.New("btk backup copies SQLite databases; back up PostgreSQL with pg_dump (see docs/operating.md, Backup and restore)")
			}
			force, _ := cmd.Flags().GetBool("force")
			if err := sqlite.Backup(cmd.Context(), db, args[0], force); err != nil {
				if errors.Is(err, sqlite.ErrBackupExists) {
					return fmt.Errorf("%s exists: choose another name, or give --force to replace it", args[0])
				}
				return err
			}
			if fi, err := os.Stat(args[0]); err == nil {
				p, err := f.printer(cmd)
				if err != nil {
					return err
				}
				// Success is the command's result: stdout, without the
				// "btk:" of errors (stderr).
				if p.format == formatJSON {
					return p.JSON(map[string]any{"database": db, "file": args[0], "bytes": fi.Size()})
				}
				fmt.Fprintf(f.io.Out, "Backed up %s to %s (%d bytes)\n", db, args[0], fi.Size())
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.String("db", "./btk.db", "SQLite database file to copy (BTK_DB)")
	fl.Bool("force", false, "replace FILE if it exists")
	bind(v, "db", fl.Lookup("db"))
	return cmd
}
