package testkit

import "testing"

func TestPersistentRedisKeepsWhatItAcknowledgedAcrossSIGKILL(t *testing.T) {
	r := StartRedisWith(t, RedisOptions{Persist: true})
	if _, err := r.Do("SET", "k", "kept"); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Do("GET", "k"); err != nil || got != "$4" {
		t.Fatalf("GET k after SIGKILL and restart = %q, %v; want the value back", got, err)
	}
}
