package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// A worker's push grant is kept in its directory beside worker.json
// (GitGrantFile, root's alone), written before the grant is in force and
// removed when it ends, and read back when a gateway starts again: a
// gateway restarted while a task runs still lets the task's agent push
// to its branch, as it did before, and nowhere else.

// GitGrantFile is the file of a worker's directory that holds its push
// grant (a GitGrant, JSON); none: no grant.
const GitGrantFile = "git-push.json"

// writeGrant writes dir's grant file whole, or removes it for nil.
func writeGrant(dir string, g *GitGrant) error {
	path := filepath.Join(dir, GitGrantFile)
	if g == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("gateway: %w", err)
		}
		return nil
	}
	return writeJSONFile(dir, GitGrantFile, g)
}

// readGrant reads dir's grant back, checked as a PUT of it is (nil, nil:
// none).
func readGrant(dir string) (*pushGrant, error) {
	b, err := os.ReadFile(filepath.Join(dir, GitGrantFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var g GitGrant
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("gateway: %s: %w", GitGrantFile, err)
	}
	return parseGrant(g)
}
