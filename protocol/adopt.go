package protocol

// TypeAdopt is the type of an Adopt document.
const TypeAdopt Type = "adopt"

// Adopt hands a warm pool worker's container to a hibernated worker: the
// worker-manager adds it to the warm worker's input as it wakes the
// hibernated one there. The wrapper, idle, checks that it may log in to
// Redis as RedisUser with its own password (the manager gave that user
// the password of the warm worker's), then re-executes itself as
// WorkerID: its heartbeat, input and output are the hibernated worker's
// from then on. No secret travels in it, and a forged one changes
// nothing: the wrapper takes it only when redis_user is the per-worker
// user of worker_id, another worker's than its own, and it can log in as
// that user with its own password; otherwise it goes on as it was.
// Consumers never send it.
type Adopt struct {
	V         int    `json:"v"`
	Type      Type   `json:"type"`
	WorkerID  string `json:"worker_id"`  // required: the hibernated worker the container becomes
	RedisUser string `json:"redis_user"` // required: the woken worker's Redis user, to log in as
}

// Validate checks every field of a.
func (a Adopt) Validate() error {
	if err := checkID("worker_id", a.WorkerID, true); err != nil {
		return err
	}
	if a.RedisUser == "" {
		return fieldErr("redis_user", "required")
	}
	if !validRedisUser(a.RedisUser) {
		return fieldErr("redis_user", "is not a Redis user name (printable ASCII, no space, '@' or '/', at most 256 bytes)")
	}
	return nil
}

// validRedisUser accepts the per-worker user names of the runtime
// (agentvisor:<prefix>:<id>): printable, no space, no '@' or '/'.
func validRedisUser(u string) bool {
	for _, r := range u {
		if r <= ' ' || r == '@' || r == '/' || r > '~' {
			return false
		}
	}
	return len(u) <= 256
}

// Encode returns the JSON document of a, with v and type set.
func (a Adopt) Encode() ([]byte, error) {
	a.V, a.Type = Version, TypeAdopt
	return encode(a)
}

// DecodeAdopt parses and validates an adopt document.
func DecodeAdopt(data []byte) (Adopt, error) {
	var a Adopt
	err := decode(TypeAdopt, data, &a, func() error { return a.Validate() })
	return a, err
}
