package reaper

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// A task's processes are not all in the agent's process group: Claude
// runs each tool command in a group of its own, and anything may call
// setsid or fork twice and be reparented to this process. What marks them
// as the task's is where they are in the process tree and when they
// started: every descendant of this process (PID 1 of the container, or
// its subreaper) started during the task, except the processes this
// reaper started and still waits for (the agent itself, a persistent
// agent, the wrapper's own commands) and the members of their process
// groups (an agent's helpers that share its group, such as Claude's MCP
// servers). Spared too are the processes in a user namespace other than
// this process's: a DOCKER worker's own engine (rootless Podman's pause
// process, conmon and the inner containers) runs in one, and its
// containers outlive the task that started them, as a daemon's do;
// killing them would leave Podman's state saying they run, and every
// later docker command failing. Only a DOCKER worker can make a user
// namespace: every other worker's seccomp profile refuses it to a
// process without CAP_SYS_ADMIN.

// userHZ is the unit of /proc/<pid>/stat's start time: USER_HZ, 100 on
// every Linux architecture the runtime builds for.
const userHZ = 100

// maxSweepRounds bounds a sweep: a process that forks while it is killed
// leaves children, reparented here, that the next round finds.
const maxSweepRounds = 20

// proc is what a sweep reads of a process from /proc/<pid>/stat.
type proc struct {
	pid, ppid, pgid int
	start           uint64 // clock ticks after boot
	zombie          bool
}

// Sweep kills (SIGKILL) every process a task started at or after since
// that is still alive, whatever its process group or session, and returns
// how many it killed. The processes this reaper started and still waits
// for, and their process groups, are spared. It holds the reaper's lock,
// so that no process it starts meanwhile is taken for a task's.
func (r *Reaper) Sweep(since time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	threshold, ok := r.clock.ticksAt(since)
	if !ok {
		return 0
	}
	killed := map[int]bool{} // a process killed is not a zombie at once
	for range maxSweepRounds {
		fresh := 0
		for _, pid := range r.strays(threshold) {
			if !killed[pid] && syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed[pid] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	return len(killed)
}

// strays lists the live descendants of this process started at or after
// threshold, less the spared ones.
func (r *Reaper) strays(threshold uint64) []int {
	procs := readProcs()
	spared := map[int]bool{} // process groups
	for pid := range r.waiting {
		if p, ok := procs[pid]; ok {
			spared[p.pgid] = true
		}
	}
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	ownNS, _ := os.Readlink("/proc/self/ns/user")
	var out []int
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			queue = append(queue, c)
			p := procs[c]
			if _, waited := r.waiting[c]; waited || spared[p.pgid] || p.zombie || p.start < threshold || otherUserNS(c, ownNS) {
				continue
			}
			out = append(out, c)
		}
	}
	return out
}

// otherUserNS reports whether pid is in a user namespace other than own
// (a process whose namespace cannot be read is taken as in own).
func otherUserNS(pid int, own string) bool {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/user")
	return err == nil && own != "" && ns != own
}

// readProcs reads every process's parent, group and start time; a
// process that ends while it reads is left out.
func readProcs() map[int]proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]proc, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if p, ok := parseStat(pid, b); ok {
			out[pid] = p
		}
	}
	return out
}

// parseStat reads /proc/<pid>/stat: "pid (comm) state ppid pgrp session
// ... starttime" (the 22nd field). comm may hold spaces and parentheses,
// so the fields are counted from the last ')'.
func parseStat(pid int, b []byte) (proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return proc{}, false
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 20 { // state is field 3, starttime field 22
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, pgid: pgid, start: start, zombie: f[0][0] == 'Z'}, true
}

// procClock turns a wall time into the clock ticks after boot that
// /proc's start times count: from /proc/uptime, but never earlier than
// this process's own start (a container's uptime may be counted from
// elsewhere, as LXCFS does; no descendant is older than this process).
type procClock struct {
	self uint64 // this process's start, in ticks after boot
	ok   bool
}

func newProcClock() procClock {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return procClock{}
	}
	p, ok := parseStat(os.Getpid(), b)
	return procClock{self: p.start, ok: ok}
}

// ticksAt is t in /proc's ticks after boot; a tick early, so that a
// process started in the tick of t counts as started after it.
func (c procClock) ticksAt(t time.Time) (uint64, bool) {
	if !c.ok {
		return 0, false
	}
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, false
	}
	up, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil {
		return 0, false
	}
	ticks := (up-time.Since(t).Seconds())*userHZ - 1
	if ticks < float64(c.self) {
		return c.self, true
	}
	return uint64(ticks), true
}
