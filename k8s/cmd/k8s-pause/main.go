// Command k8s-pause is the sandbox container of every pod on the local
// cluster (containerd's sandbox_image): it holds the pod's namespaces open
// and does nothing else. No registry can be reached here, so the usual
// registry.k8s.io/pause image is replaced by this static program in an
// image imported into Docker and loaded into the cluster's containerd.
//
// Like the upstream pause, it exits 0 on SIGINT or SIGTERM and, being PID 1
// of the pod when the pod shares one PID namespace, reaps the zombies its
// adopted children leave.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited, until none is left to wait
// for (ECHILD) or none has exited yet (0).
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
