package kubernetes

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A refusal (403) is made again while the API server's /readyz says it
// is not ready (a server just started, its authorizer not yet read the
// roles), and returned at once by a ready one (a namespace the manager
// has no rights in).
func TestForbiddenIsRetriedOnlyWhileTheServerIsNotReady(t *testing.T) {
	for _, tc := range []struct {
		name      string
		readyFrom int32 // the /readyz call from which it answers 200
		wantCalls int32
	}{
		{name: "not ready, then ready", readyFrom: 3, wantCalls: 3},
		{name: "ready", readyFrom: 1, wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var readyz atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readyz" {
					http.NotFound(w, r)
					return
				}
				if readyz.Add(1) < tc.readyFrom {
					http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusServiceUnavailable)
					return
				}
				_, _ = w.Write([]byte("ok"))
			}))
			defer srv.Close()
			api, err := clientset.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			e := New(Params{Client: api, Namespace: "agents", Prefix: "worker:test"})
			var calls atomic.Int32
			err = e.calls.retry(context.Background(), func() error {
				calls.Add(1)
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no rights"))
			})
			if got := calls.Load(); got != tc.wantCalls {
				t.Errorf("%d calls, want %d", got, tc.wantCalls)
			}
			if !apierrors.IsForbidden(err) {
				t.Errorf("the last error: %v, want the refusal", err)
			}
		})
	}
}
