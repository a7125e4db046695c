//go:build unix

// Package e2elock serialises end-to-end tests of different test binaries
// that would otherwise compete for the same broker tasks: `go test ./...`
// runs packages in parallel, and two workers serving the conformance kinds at
// once would each receive some of the other's tasks.
package e2elock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Conformance is the lock held while a test serves the conformance kinds.
const Conformance = "converge-go-sdk-conformance.lock"

// Acquire takes the named exclusive lock (a file in the temporary
// directory), waiting for other processes holding it, and releases it when
// the test ends.
func Acquire(t testing.TB, name string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("open lock %s: %v", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("lock %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	})
}
