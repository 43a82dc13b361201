// Package seal keeps the wrapper's secrets out of the agent's reach. The
// agent runs under the wrapper's own uid, so whatever the wrapper's
// process shows to its uid, the agent can read: /proc/<pid>/environ, its
// memory, its open files. Seal, called first thing in main:
//
//  1. makes the process non-dumpable (PR_SET_DUMPABLE 0): its /proc files
//     belong to root, so that a process of the same uid without
//     CAP_SYS_PTRACE can neither read its environ, mem or fd nor ptrace it;
//  2. hands the whole environment over to a new image of itself, through a
//     memfd inherited across execve, and re-executes itself (same pid: PID
//     1 stays PID 1) with only the harmless variables of Keep, so that
//     /proc/<pid>/environ, readable or not, holds no secret;
//  3. in the new image, makes itself non-dumpable again (execve resets the
//     flag), reads the memfd and closes it.
//
// Nothing else runs between 1 and 3: the agent starts later.
package seal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// EnvFD names the descriptor of the memfd that carries the environment
// into the re-executed image. It is the only variable Seal adds.
const EnvFD = "WORKER_WRAPPER_ENV_FD"

// Keep says whether a variable stays in the re-executed process's own
// environment: names that carry no secret and that the Go runtime, the
// standard library or the wrapper's start read from the process
// environment. Proxy variables stay unless they hold credentials.
func Keep(name, value string) bool {
	switch name {
	case "PATH", "HOME", "USER", "LOGNAME", "SHELL", "HOSTNAME", "TERM", "TZ", "TMPDIR", "LANG", "LANGUAGE",
		"LOG_LEVEL", "GODEBUG", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GOTRACEBACK":
		return true
	case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy":
		return !strings.Contains(value, "@")
	}
	return strings.HasPrefix(name, "LC_")
}

// Seal makes the process non-dumpable and returns its whole environment,
// re-executing it first with only the variables Keep allows when there is
// any other. It returns only in the image that holds no secret in its
// environment; the caller reads its configuration from the returned
// slice, never from os.Getenv.
func Seal() ([]string, error) {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("seal: PR_SET_DUMPABLE: %w", err)
	}
	if v, ok := os.LookupEnv(EnvFD); ok {
		os.Unsetenv(EnvFD)
		return readEnv(v)
	}
	environ := os.Environ()
	if len(kept(environ)) == len(environ) {
		return environ, nil // nothing to hide
	}
	return nil, Reexec(environ)
}

// kept is what of environ stays in the process's own environment.
func kept(environ []string) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if Keep(name, value) {
			out = append(out, kv)
		}
	}
	return out
}

// Reexec re-executes the process (same pid) with environ as its whole
// environment, handed over through a memfd as Seal does: the new image's
// Seal returns it, and its own environment holds only what Keep allows.
// It returns only on failure. The wrapper calls it to become another
// worker (an adopt document): the process stays PID 1.
func Reexec(environ []string) error {
	keep := kept(environ)
	fd, err := writeEnv(environ)
	if err != nil {
		return err
	}
	keep = append(keep, EnvFD+"="+strconv.Itoa(fd))
	// The binary's own path (resolved from /proc/self/exe), not
	// /proc/self/exe itself: the process keeps its name (comm).
	exe, err := os.Executable()
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("seal: own executable: %w", err)
	}
	err = syscall.Exec(exe, os.Args, keep)
	unix.Close(fd)
	return fmt.Errorf("seal: re-execute: %w", err)
}

// writeEnv stores environ, NUL-separated, in a memfd that stays open
// across execve, rewound for the reader.
func writeEnv(environ []string) (int, error) {
	fd, err := unix.MemfdCreate("worker-wrapper-env", 0) // no MFD_CLOEXEC: the new image inherits it
	if err != nil {
		return -1, fmt.Errorf("seal: memfd_create: %w", err)
	}
	data := []byte(strings.Join(environ, "\x00"))
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("seal: write the environment: %w", err)
		}
		data = data[n:]
	}
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("seal: seek: %w", err)
	}
	return fd, nil
}

// readEnv reads the environment from the inherited descriptor and closes it.
func readEnv(v string) ([]string, error) {
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("seal: %s=%q is not a descriptor", EnvFD, v)
	}
	f := os.NewFile(uintptr(fd), "env")
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("seal: read the environment: %w", err)
	}
	if len(data) == 0 {
		return nil, errors.New("seal: the inherited environment is empty")
	}
	return strings.Split(string(bytes.TrimRight(data, "\x00")), "\x00"), nil
}

// Getenv returns a lookup of name in environ, the later entry winning as
// in os.Getenv.
func Getenv(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			m[name] = value
		}
	}
	return func(name string) string { return m[name] }
}
