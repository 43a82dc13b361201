package ops

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUnsafeTokenDir is returned by WriteTokenFile for a directory another
// user could write in or that another user owns: whoever can replace the
// file there could hand the manager's operator a token of their own, or
// read the one written.
var ErrUnsafeTokenDir = errors.New("ops: the token file's directory is not the manager's alone")

// WriteTokenFile writes token to path, mode 0600, so that a token the
// manager made at start reaches its operator without passing through a
// log (which is often a file any local user can read). The directory is
// made 0700 when missing and must be the manager's own (its uid, not
// writable by group or others). The file is written under a temporary
// name and renamed into place: it is never readable with another mode,
// and a symlink left at path is replaced, never followed.
func WriteTokenFile(path, token string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ops: token file: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("ops: token file: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is %v", ErrUnsafeTokenDir, dir, fi.Mode().Perm())
	}
	f, err := os.CreateTemp(dir, ".ops-token-*") // 0600, O_EXCL
	if err != nil {
		return fmt.Errorf("ops: token file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.WriteString(token + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("ops: token file %s: %w", path, werr)
	}
	return nil
}
