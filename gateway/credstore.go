package gateway

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// credentialStore holds the credentials in force: Config.Credentials,
// then the credentials file's. It reads the file at start, again on
// reload (SIGHUP), and when it changed (run); a version of the file that
// is refused leaves the credentials in force as they were.
type credentialStore struct {
	static []Credential // Config.Credentials, checked
	file   string       // "": none
	poll   time.Duration
	log    *slog.Logger

	inForce atomic.Pointer[credentials] // read at each egress request

	mu   sync.Mutex      // serialises reads of the file
	read credentialsFile // the version of the file in force (mu held)
}

// The calls of the egress proxy and of the control API.
var (
	_ credentialSource = (*credentialStore)(nil)
	_ credentialHosts  = (*credentialStore)(nil)
)

// credentialParams are what the credential store is built from.
type credentialParams struct {
	static []Credential
	file   string
	poll   time.Duration // how often the file is checked for a change
	log    *slog.Logger
}

// newCredentialStore checks p.static and reads p.file: a bad one stops
// the gateway before it serves anything.
func newCredentialStore(p credentialParams) (*credentialStore, error) {
	static, err := parseCredentials("Config.Credentials", p.static)
	if err != nil {
		return nil, err
	}
	s := &credentialStore{static: slices.Clone(p.static), file: p.file, poll: p.poll, log: p.log}
	s.inForce.Store(&static)
	if s.file != "" {
		if err := s.load(true); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// current returns the credentials in force.
func (s *credentialStore) current() credentials { return *s.inForce.Load() }

// hosts returns the hosts with a credential for worker id in project.
func (s *credentialStore) hosts(id, project string) []string { return s.current().hosts(id, project) }

// reload reads the file again; an error is logged and returned, and the
// credentials in force stay.
func (s *credentialStore) reload() error {
	if s.file == "" {
		return nil
	}
	err := s.load(true)
	if err != nil {
		s.log.Error("credentials file not reloaded: the credentials in force stay", "err", err)
	}
	return err
}

// run reads the file again each time it changes, until ctx is done.
func (s *credentialStore) run(ctx context.Context) {
	if s.file == "" {
		return
	}
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.load(false); err != nil {
				s.log.Error("credentials file not reloaded: the credentials in force stay", "err", err)
			}
		}
	}
}

// load reads the file when force or when it changed since it was read,
// and puts its credentials in force.
func (s *credentialStore) load(force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force {
		fi, err := os.Stat(s.file)
		if err == nil && fi.ModTime().Equal(s.read.mtime) && fi.Size() == s.read.size {
			return nil
		}
	}
	cf, err := readCredentialsFile(s.file)
	if err != nil {
		return err
	}
	static, _ := parseCredentials("Config.Credentials", s.static)
	file, _ := parseCredentials("credentials file", cf.creds)
	all := append(static, file...)
	s.read = cf
	s.inForce.Store(&all)
	hosts := make([]string, 0, len(all))
	for _, c := range all {
		hosts = append(hosts, c.host.String())
	}
	s.log.Info("credentials loaded", "file", s.file, "count", len(all), "hosts", hosts)
	return nil
}
