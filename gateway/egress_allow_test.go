package gateway

// Whose allowlists are in force: each worker's own, the operator's for
// all, and both again after a restart.

import (
	"context"
	"net/http"
	"slices"
	"testing"
)

// Each worker's egress.sock serves that worker's list only.
func TestEgressPerWorker(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "a", "x.example.test")
	e.open(t, "b", "y.example.test")
	for _, tc := range []struct{ id, ok, no string }{{"a", "x", "y"}, {"b", "y", "x"}} {
		resp, _, _ := connect(t, e.sock(tc.id), tc.ok+".example.test:443")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s to %s: %s", tc.id, tc.ok, resp.Status)
		}
		resp, body, _ := connect(t, e.sock(tc.id), tc.no+".example.test:443")
		checkRefused(t, tc.id, resp, body, tc.no+".example.test:443")
	}
	for _, id := range []string{"a", "b"} {
		if st := e.stats(t, id); st.EgressAllowed != 1 || st.EgressRefused != 1 {
			t.Errorf("%s: stats %+v", id, st)
		}
	}
}

// The operator's list applies to every worker, besides its own; GET
// /workers/{id} shows both and the list in force.
func TestEgressOperatorDefaults(t *testing.T) {
	e := newEgressEnv(t, "pkg.example.test", "*.mirror.test")
	e.open(t, "a")
	e.open(t, "b", "git.example.test", "pkg.example.test")
	for _, id := range []string{"a", "b"} {
		for _, host := range []string{"pkg.example.test", "eu.mirror.test"} {
			if resp, _, _ := connect(t, e.sock(id), host+":443"); resp.StatusCode != http.StatusOK {
				t.Errorf("%s to %s: %s", id, host, resp.Status)
			}
		}
	}
	resp, body, _ := connect(t, e.sock("a"), "git.example.test:443")
	checkRefused(t, "a to b's host", resp, body, "git.example.test:443")
	if resp, _, _ := connect(t, e.sock("b"), "git.example.test:443"); resp.StatusCode != http.StatusOK {
		t.Errorf("b to its own host: %s", resp.Status)
	}
	info, err := e.c.Worker(context.Background(), "b")
	if err != nil || !slices.Equal(info.Allow, []string{"git.example.test", "pkg.example.test"}) ||
		!slices.Equal(info.DefaultAllow, []string{"pkg.example.test", "*.mirror.test"}) ||
		!slices.Equal(info.EgressAllow, []string{"pkg.example.test", "*.mirror.test", "git.example.test"}) {
		t.Fatalf("%+v %v", info, err)
	}
}

// A gateway started again on the same Dir enforces the same lists.
func TestEgressRestartKeepsLists(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "git.example.test")
	e.open(t, "w1", "pkg.example.test") // changed: the last list counts
	if err := e.g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.start(t, nil)
	resp, _, _ := connect(t, e.sock("w1"), "pkg.example.test:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after restart: %s", resp.Status)
	}
	resp, body, _ := connect(t, e.sock("w1"), "git.example.test:443")
	checkRefused(t, "after restart", resp, body, "git.example.test:443")
	info, err := e.c.Worker(context.Background(), "w1")
	if err != nil || !slices.Equal(info.Allow, []string{"pkg.example.test"}) {
		t.Fatalf("%+v %v", info, err)
	}
}
