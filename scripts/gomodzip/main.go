// Command gomodzip writes a Go module the way a module proxy serves a tagged
// version of it, with golang.org/x/mod/zip (the code the go command uses), so
// scripts/release ships the exact bytes `go get` would download.
//
//	gomodzip proxy -dir sdk-gen/go -version v0.1.0 -license LICENSE -time 2026-01-02T03:04:05Z -out dist/go/proxy
//
// writes <out>/<escaped module path>/@v/{list,<version>.info,<version>.mod,<version>.zip}
// (a GOPROXY=file:// directory) and prints the two go.sum lines of the version.
// A module in a subdirectory of its repository without a LICENSE of its own
// gets the repository's, as the go command does when it zips a tag.
//
//	gomodzip vcs -repo CLONE -rev sdk-gen/go/v0.1.0 -subdir sdk-gen/go -version v0.1.0 -zip FILE
//
// zips the module as committed at -rev of the git repository (as the go command
// does for a tag, `git archive` of the subdirectory) and fails unless it holds
// the same files as FILE, listing those that differ.
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: gomodzip proxy|vcs [flags]"))
	}
	var err error
	switch os.Args[1] {
	case "proxy":
		err = proxy(os.Args[2:])
	case "vcs":
		err = vcs(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (proxy or vcs)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gomodzip:", err)
	os.Exit(1)
}

func proxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	dir := fs.String("dir", "", "module directory (holds go.mod)")
	version := fs.String("version", "", "module version, e.g. v0.1.0")
	license := fs.String("license", "", "LICENSE to add when the module directory has none")
	stamp := fs.String("time", "", "the version's time (RFC 3339), e.g. the commit's")
	out := fs.String("out", "", "GOPROXY directory to write into")
	_ = fs.Parse(args)
	if *dir == "" || *version == "" || *out == "" || *stamp == "" {
		return errors.New("proxy needs -dir, -version, -time and -out")
	}
	when, err := time.Parse(time.RFC3339, *stamp)
	if err != nil {
		return fmt.Errorf("-time: %w", err)
	}
	goMod, err := os.ReadFile(filepath.Join(*dir, "go.mod"))
	if err != nil {
		return err
	}
	path := modfile.ModulePath(goMod)
	if path == "" {
		return fmt.Errorf("%s/go.mod names no module", *dir)
	}
	m := module.Version{Path: path, Version: *version}
	if err := module.Check(m.Path, m.Version); err != nil {
		return err
	}

	// The directory's files as the go command selects them (no nested modules,
	// VCS directories, symbolic links or vendored packages), then LICENSE.
	var fromDir bytes.Buffer
	if err := modzip.CreateFromDir(&fromDir, m, *dir); err != nil {
		return err
	}
	files, err := zipFiles(fromDir.Bytes(), m)
	if err != nil {
		return err
	}
	if !hasFile(files, "LICENSE") && *license != "" {
		data, err := os.ReadFile(*license)
		if err != nil {
			return err
		}
		files = append(files, dataFile{name: "LICENSE", data: data})
	}
	var zipped bytes.Buffer
	if err := modzip.Create(&zipped, m, files); err != nil {
		return err
	}

	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(*out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{m.Version, when.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	zipPath := filepath.Join(vdir, m.Version+".zip")
	for name, data := range map[string][]byte{
		"list":              []byte(m.Version + "\n"),
		m.Version + ".info": append(info, '\n'),
		m.Version + ".mod":  goMod,
		m.Version + ".zip":  zipped.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	// What `go mod download` would check and unpack: fails on anything the go
	// command would refuse.
	if _, err := modzip.CheckZip(m, zipPath); err != nil {
		return err
	}
	zipHash, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		return err
	}
	modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(goMod)), nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n%s %s/go.mod %s\n", m.Path, m.Version, zipHash, m.Path, m.Version, modHash)
	return nil
}

func vcs(args []string) error {
	fs := flag.NewFlagSet("vcs", flag.ExitOnError)
	repo := fs.String("repo", "", "git repository (a clone with a .git directory)")
	rev := fs.String("rev", "", "revision, e.g. the tag")
	subdir := fs.String("subdir", "", "the module's directory in the repository")
	version := fs.String("version", "", "module version")
	want := fs.String("zip", "", "module zip to compare with")
	_ = fs.Parse(args)
	if *repo == "" || *rev == "" || *version == "" || *want == "" {
		return errors.New("vcs needs -repo, -rev, -version and -zip")
	}
	wantFiles, err := os.ReadFile(*want)
	if err != nil {
		return err
	}
	r, err := zip.NewReader(bytes.NewReader(wantFiles), int64(len(wantFiles)))
	if err != nil {
		return err
	}
	// The module path is the zip's own: every entry starts with "path@version/".
	if len(r.File) == 0 {
		return fmt.Errorf("%s is empty", *want)
	}
	prefix, _, _ := strings.Cut(r.File[0].Name, "@")
	m := module.Version{Path: prefix, Version: *version}
	abs, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	var fromGit bytes.Buffer
	if err := modzip.CreateFromVCS(&fromGit, m, abs, *rev, *subdir); err != nil {
		return err
	}
	a, err := contents(wantFiles, m)
	if err != nil {
		return err
	}
	b, err := contents(fromGit.Bytes(), m)
	if err != nil {
		return err
	}
	var diff []string
	for name, sum := range a {
		if other, ok := b[name]; !ok {
			diff = append(diff, "only in the release: "+name)
		} else if other != sum {
			diff = append(diff, "differs: "+name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			diff = append(diff, "only at "+*rev+": "+name)
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		return fmt.Errorf("%s and %s at %s differ:\n  %s", *want, m.Path, *rev, strings.Join(diff, "\n  "))
	}
	fmt.Printf("%s at %s: the same %d files\n", m.Path, *rev, len(a))
	return nil
}

// zipFiles turns a module zip back into files for modzip.Create.
func zipFiles(data []byte, m module.Version) ([]modzip.File, error) {
	r, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	prefix := m.Path + "@" + m.Version + "/"
	var files []modzip.File
	for _, f := range r.File {
		name, ok := strings.CutPrefix(f.Name, prefix)
		if !ok {
			return nil, fmt.Errorf("zip entry %q outside %s", f.Name, prefix)
		}
		files = append(files, zipEntry{name: name, f: f})
	}
	return files, nil
}

// contents maps each file of a module zip (without the path@version/ prefix)
// to a digest of its bytes.
func contents(data []byte, m module.Version) (map[string]string, error) {
	r, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	prefix := m.Path + "@" + m.Version + "/"
	out := make(map[string]string)
	for _, f := range r.File {
		name, ok := strings.CutPrefix(f.Name, prefix)
		if !ok {
			return nil, fmt.Errorf("zip entry %q outside %s", f.Name, prefix)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		h, err := dirhash.Hash1([]string{name}, func(string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(body)), nil
		})
		if err != nil {
			return nil, err
		}
		out[name] = h
	}
	return out, nil
}

func hasFile(files []modzip.File, name string) bool {
	for _, f := range files {
		if f.Path() == name {
			return true
		}
	}
	return false
}

type zipEntry struct {
	name string
	f    *zip.File
}

func (e zipEntry) Path() string                 { return e.name }
func (e zipEntry) Lstat() (os.FileInfo, error)  { return e.f.FileInfo(), nil }
func (e zipEntry) Open() (io.ReadCloser, error) { return e.f.Open() }

type dataFile struct {
	name string
	data []byte
}

func (d dataFile) Path() string                 { return d.name }
func (d dataFile) Lstat() (os.FileInfo, error)  { return dataInfo(d), nil }
func (d dataFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(d.data)), nil }

type dataInfo dataFile

func (i dataInfo) Name() string       { return filepath.Base(i.name) }
func (i dataInfo) Size() int64        { return int64(len(i.data)) }
func (i dataInfo) Mode() os.FileMode  { return 0o644 }
func (i dataInfo) ModTime() time.Time { return time.Time{} }
func (i dataInfo) IsDir() bool        { return false }
func (i dataInfo) Sys() any           { return nil }
