// Package examples will hold runnable programs that show how other services
// use the spawner and the protocol.
package examples
