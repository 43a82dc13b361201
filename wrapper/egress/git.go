package egress

import (
	"strconv"
)

// GitInsteadOf returns the environment entries (GIT_CONFIG_COUNT,
// GIT_CONFIG_KEY_i, GIT_CONFIG_VALUE_i) that have git reach each of hosts
// at http://host/ where it was told https://host/: the gateway holds a
// credential for those hosts and adds it to a plain HTTP request it reads
// on egress.sock, speaking HTTPS upstream itself. The secret stays with
// the gateway; the agent's git holds none. The entries are numbered from
// n on, for an environment that already has n of them, and
// GIT_CONFIG_COUNT counts them all. Nil for no hosts.
func GitInsteadOf(n int, hosts []string) []string {
	if len(hosts) == 0 {
		return nil
	}
	env := make([]string, 0, 1+2*len(hosts))
	for i, h := range hosts {
		k := strconv.Itoa(n + i)
		env = append(env, "GIT_CONFIG_KEY_"+k+"=url.http://"+h+"/.insteadOf", "GIT_CONFIG_VALUE_"+k+"=https://"+h+"/")
	}
	return append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(n+len(hosts)))
}
