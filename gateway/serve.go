package gateway

import (
	"fmt"
	"os"
	"path/filepath"
)

// workerSockets makes a worker's sockets and hands each to its server:
// redis.sock to the Redis relay, model.sock to a model server of the
// model API (none when Config.Model is ""), egress.sock to an egress
// proxy under the egress policy. The relay, the model API and the policy
// are shared by every worker; a model server and an egress proxy are the
// worker's own.
type workerSockets struct {
	root   string // Config.Dir, where each socket is staged before it is renamed into place
	uid    int    // Config.WorkerUID, the sockets' owner
	redis  *redisRelay
	model  *modelAPI // nil: no model.sock
	egress *egressPolicy
}

var _ socketMaker = (*workerSockets)(nil) // the registry's call

// listen makes and serves the sockets of w, in its directory.
func (s *workerSockets) listen(w *worker) error {
	dir := w.dir // w is new: nobody renames it yet
	l, err := listenUnix(s.root, dir, RedisSocket, WorkerSocketMode, s.uid)
	if err != nil {
		return fmt.Errorf("gateway: worker %s: %s: %w", w.ID(), RedisSocket, err)
	}
	side := w.side(RedisSocket)
	w.serve(l, nil, func(l *unixListener) { s.redis.serve(side, l) })
	if s.model == nil {
		_ = os.Remove(filepath.Join(dir, ModelSocket))
	} else {
		if l, err = listenUnix(s.root, dir, ModelSocket, WorkerSocketMode, s.uid); err != nil {
			return fmt.Errorf("gateway: worker %s: %s: %w", w.ID(), ModelSocket, err)
		}
		m := newModelServer(s.model, w.side(ModelSocket), w)
		w.serve(l, m, m.serve)
	}
	if l, err = listenUnix(s.root, dir, EgressSocket, WorkerSocketMode, s.uid); err != nil {
		return fmt.Errorf("gateway: worker %s: %s: %w", w.ID(), EgressSocket, err)
	}
	e := newEgress(s.egress, w.side(EgressSocket), w, refusalFeed{side: w.side(EgressSocket), token: w})
	w.serve(l, e, e.serve)
	return nil
}
