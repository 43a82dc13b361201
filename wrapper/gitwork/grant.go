package gitwork

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
)

// SocketGranter puts the push grant on the gateway's egress socket, with
// the worker's token (the one model.sock wants): the agent, which can
// reach the socket too, holds no token and cannot widen the grant.
type SocketGranter struct {
	Socket string // the worker's egress.sock
	Token  string // MODEL_SOCKET_TOKEN
	hc     *http.Client
}

var _ Granter = (*SocketGranter)(nil)

// NewSocketGranter is a Granter for the gateway's egress socket.
func NewSocketGranter(socket, token string) *SocketGranter {
	return &SocketGranter{Socket: socket, Token: token, hc: &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// Grant lets the worker push to g's branch of g's remote.
func (s *SocketGranter) Grant(ctx context.Context, g protocol.Git) error {
	body, err := json.Marshal(gateway.GitGrant{Remote: g.Remote, Branch: g.Branch, AllowForcePush: g.AllowForcePush})
	if err != nil {
		return err
	}
	return s.do(ctx, http.MethodPut, body)
}

// Revoke lets the worker push nowhere.
func (s *SocketGranter) Revoke(ctx context.Context) error { return s.do(ctx, http.MethodDelete, nil) }

func (s *SocketGranter) do(ctx context.Context, method string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://gateway"+gateway.GitGrantPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(gateway.ModelTokenHeader, s.Token)
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("gateway push grant: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("gateway push grant: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
