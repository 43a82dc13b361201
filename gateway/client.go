package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Client is the worker manager's side of the control API: HTTP over the
// gateway's control socket, Dir/control.sock.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the gateway serving dir (the gateway's
// Config.Dir).
func NewClient(dir string) *Client {
	socket := filepath.Join(dir, ControlSocket)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    2,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

// Socket is the control socket the client calls.
func (c *Client) Socket() string { return c.socket }

// Open has the gateway serve worker id with its egress allowlist: it
// returns once the worker's sockets accept connections. Opening an open
// worker again is no error.
func (c *Client) Open(ctx context.Context, id string, allow []string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	if allow == nil {
		allow = []string{}
	}
	_, err := c.OpenSpec(ctx, WorkerSpec{WorkerID: id, Allow: allow})
	return err
}

// OpenSpec is Open with the whole spec (the worker's project,
// spec.ProjectID, scopes the credentials it gets); it returns what the
// gateway serves the worker, its credentialed hosts included.
func (c *Client) OpenSpec(ctx context.Context, spec WorkerSpec) (WorkerInfo, error) {
	if err := ValidID(spec.WorkerID); err != nil {
		return WorkerInfo{}, err
	}
	if spec.Allow == nil {
		spec.Allow = []string{}
	}
	body, _ := json.Marshal(spec)
	var info WorkerInfo
	err := c.do(ctx, http.MethodPut, "/workers/"+url.PathEscape(spec.WorkerID), body, &info)
	return info, err
}

// Worker returns what the gateway serves for worker id: its sockets and
// the egress allowlist in force.
func (c *Client) Worker(ctx context.Context, id string) (WorkerInfo, error) {
	var info WorkerInfo
	if err := ValidID(id); err != nil {
		return info, err
	}
	err := c.do(ctx, http.MethodGet, "/workers/"+url.PathEscape(id), nil, &info)
	return info, err
}

// Close has the gateway stop serving worker id: its sockets, its open
// connections and its directory go. Closing an unknown worker is no error.
func (c *Client) Close(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, "/workers/"+url.PathEscape(id), nil, nil)
}

// Rename makes open worker from the gateway's worker to: its directory
// (renamed on disk), sockets and connections (Gateway.Rename).
func (c *Client) Rename(ctx context.Context, from, to string) (WorkerInfo, error) {
	if err := ValidID(from); err != nil {
		return WorkerInfo{}, err
	}
	body, err := json.Marshal(map[string]string{"to": to})
	if err != nil {
		return WorkerInfo{}, err
	}
	var info WorkerInfo
	err = c.do(ctx, http.MethodPost, "/workers/"+url.PathEscape(from)+"/rename", body, &info)
	return info, err
}

// Workers returns the ids of the workers the gateway serves, sorted.
func (c *Client) Workers(ctx context.Context) ([]string, error) {
	var out struct {
		Workers []string `json:"workers"`
	}
	if err := c.do(ctx, http.MethodGet, "/workers", nil, &out); err != nil {
		return nil, err
	}
	return out.Workers, nil
}

// Stats returns the counters of every worker the gateway serves.
func (c *Client) Stats(ctx context.Context) (map[string]WorkerStats, error) {
	var out struct {
		Workers map[string]WorkerStats `json:"workers"`
	}
	if err := c.do(ctx, http.MethodGet, "/stats", nil, &out); err != nil {
		return nil, err
	}
	return out.Workers, nil
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://gateway"+path, rd)
	if err != nil {
		return fmt.Errorf("gateway: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("gateway: not running at %s: %w", c.socket, err)
		}
		return fmt.Errorf("gateway: %s %s at %s: %w", method, path, c.socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("gateway: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return fmt.Errorf("gateway: %s %s: %s: %s", method, path, resp.Status, msg)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("gateway: %s %s: answer: %w", method, path, err)
		}
	}
	return nil
}
