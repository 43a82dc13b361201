// Command innerprobe runs in a container inside a DOCKER worker and says
// what it sees there: its uid, its network interfaces, the hostname file
// of the directory mounted at /x, whether a Docker engine's socket is
// there and whether the address given (the host's Redis) answers. With
// "sleep" it stays, so the host can look at it.
package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	fmt.Println("uid", os.Getuid())
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		fmt.Println("interface", i.Name)
	}
	if b, err := os.ReadFile("/x/hostname"); err == nil {
		fmt.Printf("mounted-hostname %s", b)
	}
	for _, p := range []string{"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock"} {
		if _, err := os.Stat(p); err == nil {
			fmt.Println("socket", p)
		}
	}
	for _, a := range os.Args[1:] {
		if a == "sleep" {
			time.Sleep(10 * time.Minute)
		}
		if c, err := net.DialTimeout("tcp", a, 2*time.Second); err == nil {
			c.Close()
			fmt.Println("reached", a)
		}
	}
}
