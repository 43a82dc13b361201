// Package ops is the worker-manager's operator endpoint: one HTTP server
// for /metrics and the dashboard, behind the operator token (a bearer
// token, or a session cookie a browser gets from /login), and who acts
// (Operator) for the actions the dashboard records. There is no open
// mode: Serve refuses an empty token.
package ops
