package migrations

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// createTable finds the tables a migration's Up section creates.
var createTable = regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_][a-z0-9_]*)`)

// TestArchitecturePageNamesEveryTable: every table a migration creates is
// named, in backquotes, in the Postgres section of
// docs/architecture/README.md, which says who writes and who reads it.
func TestArchitecturePageNamesEveryTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "architecture", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	start := strings.Index(section, "## Postgres")
	if start < 0 {
		t.Fatal("docs/architecture/README.md has no Postgres section")
	}
	section = section[start:]
	if end := strings.Index(section[len("## Postgres"):], "\n## "); end >= 0 {
		section = section[:len("## Postgres")+end]
	}
	tables := map[string]bool{}
	err = fs.WalkDir(files, "sql", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		up := string(b)
		if i := strings.Index(up, "-- +goose Down"); i >= 0 {
			up = up[:i]
		}
		for _, m := range createTable.FindAllStringSubmatch(up, -1) {
			tables[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) < 10 {
		t.Fatalf("found %d tables in the migrations: the pattern is broken", len(tables))
	}
	for table := range tables {
		if !strings.Contains(section, "`"+table+"`") {
			t.Errorf("docs/architecture/README.md's Postgres section does not name `%s`: add who writes and reads it", table)
		}
	}
}
