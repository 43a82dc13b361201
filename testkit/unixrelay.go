package testkit

import (
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// UnixRelay listens on a unix socket in a temporary directory and relays
// every connection to the TCP address target, both ways, as a sealed
// worker's gateway does; it returns the socket's path and counts the
// connections it accepted. It stops when the test ends, cutting the
// connections still open.
func UnixRelay(t testing.TB, target string) (path string, accepted func() int) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("testkit: unix relay: %v", err)
	}
	var mu sync.Mutex
	n := 0
	open := map[net.Conn]bool{}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open[c], open[up] = true, true
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return path, func() int { mu.Lock(); defer mu.Unlock(); return n }
}
