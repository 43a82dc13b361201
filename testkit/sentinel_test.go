package testkit

import (
	"testing"
	"time"
)

func TestSentinelFailsOver(t *testing.T) {
	s := StartSentinel(t, SentinelOptions{Password: "pw", SentinelPassword: "spw"})
	first, err := s.Primary()
	if err != nil || first != s.Servers[0] {
		t.Fatalf("primary %v, %v; want the first server", first, err)
	}
	if _, err := first.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := s.Failover(); err != nil {
		t.Fatal(err)
	}
	second, err := s.WaitNewPrimary(first, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER: %s is primary after %s", second.Addr, time.Since(t0).Round(time.Millisecond))
	if v, err := second.Do("GET", "k"); err != nil || v != "$1" {
		t.Fatalf("GET k on the new primary: %q, %v", v, err)
	}
	t0 = time.Now()
	if err := second.Kill(); err != nil {
		t.Fatal(err)
	}
	third, err := s.WaitNewPrimary(second, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL of the primary: %s is primary after %s", third.Addr, time.Since(t0).Round(time.Millisecond))
	if err := s.Rejoin(second, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}
