package images

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// GCClient is the part of the Docker client the image collector uses.
type GCClient interface {
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ImageRemove(ctx context.Context, imageID string, options image.RemoveOptions) ([]image.DeleteResponse, error)
	BuildCachePrune(ctx context.Context, opts build.CachePruneOptions) (*build.CachePruneReport, error)
}

var _ GCClient = (*client.Client)(nil)

// GC removes the worker images of its key prefix (those whose use it
// recorded, Keys.ImagesLastUsed) that nobody used for Retention and no
// container uses (running, paused or stopped); images only other prefixes
// or other tools used are never touched. With PruneBuildCache it then
// prunes the build cache (seed 001 §4.1). Its knowledge is in Redis (last use) and in image labels, not in
// memory, so it is right after a restart.
type GC struct {
	Docker    GCClient
	Redis     redis.Cmdable
	Keys      protocol.Keys
	Retention time.Duration // default 7 days
	Interval  time.Duration // default 24 h
	DryRun    bool          // list what it would remove, remove nothing
	// Labels narrows the images considered to those that also carry these
	// labels (key=value), beyond io.agentvisor.managed=true.
	Labels []string
	// PruneBuildCache (GC_PRUNE_BUILD_CACHE, off) also prunes the engine's
	// whole build cache after a collection: the cache carries no owner, so
	// only an operator who owns the engine turns it on.
	PruneBuildCache bool
	Now             func() time.Time
	Log             *slog.Logger
}

// GCReport says what one collection did.
type GCReport struct {
	Removed    []string // tags removed (or, in a dry run, that would be)
	KeptInUse  []string // stale, but a container uses them
	Kept       int      // recent enough
	NotOurs    int      // worker images this prefix never used: left alone
	CacheBytes uint64   // build cache reclaimed
	DryRun     bool
}

func (g *GC) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// Collect runs one collection.
func (g *GC) Collect(ctx context.Context) (GCReport, error) {
	retention := g.Retention
	if retention <= 0 {
		retention = 7 * 24 * time.Hour
	}
	rep := GCReport{DryRun: g.DryRun}
	f := filters.NewArgs(filters.Arg("label", protocol.LabelManaged+"=true"),
		filters.Arg("reference", protocol.ImageRepository+":*"), filters.Arg("reference", ProjectRepository+":*"))
	for _, l := range g.Labels {
		f.Add("label", l)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	images, err := g.Docker.ImageList(lctx, image.ListOptions{Filters: f})
	if err != nil {
		return rep, fmt.Errorf("spawner: gc: list images: %w", err)
	}
	containers, err := g.Docker.ContainerList(lctx, container.ListOptions{All: true})
	if err != nil {
		return rep, fmt.Errorf("spawner: gc: list containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range containers {
		used[c.ImageID] = true
	}
	now := g.now()
	// The worker images first, then the project images under them (a
	// project image is the parent of its workers' images: it can go only
	// once they have).
	for _, repo := range []string{protocol.ImageRepository, ProjectRepository} {
		if err := g.collect(lctx, repo, images, used, now, retention, &rep); err != nil {
			return rep, err
		}
	}
	if !g.DryRun && g.PruneBuildCache {
		if r, err := g.Docker.BuildCachePrune(lctx, build.CachePruneOptions{All: true}); err == nil && r != nil {
			rep.CacheBytes = r.SpaceReclaimed
		} else if err != nil {
			g.Logger().Warn("gc: build cache not pruned", "err", err)
		}
	}
	g.Logger().Info("image gc", "removed", rep.Removed, "kept_in_use", rep.KeptInUse, "kept", rep.Kept, "not_ours", rep.NotOurs,
		"cache_bytes", rep.CacheBytes, "dry_run", g.DryRun)
	return rep, nil
}

// collect removes the images of repo (worker or worker-project) that
// nobody used for retention and no container uses, or lists them (DryRun).
func (g *GC) collect(lctx context.Context, repo string, images []image.Summary, used map[string]bool, now time.Time, retention time.Duration, rep *GCReport) error {
	for _, img := range images {
		for _, tag := range img.RepoTags {
			if !strings.HasPrefix(tag, repo+":") {
				continue
			}
			last, err := rdb.New(g.Redis, g.Keys).ImageLastUsed(lctx, tag)
			if err != nil {
				return fmt.Errorf("spawner: gc: last use of %s: %w", tag, err)
			}
			if last.IsZero() {
				rep.NotOurs++
				continue
			}
			switch {
			case now.Sub(last) < retention:
				rep.Kept++
			case used[img.ID]:
				rep.KeptInUse = append(rep.KeptInUse, tag)
			default:
				rep.Removed = append(rep.Removed, tag)
				if g.DryRun {
					continue
				}
				if _, err := g.Docker.ImageRemove(lctx, tag, image.RemoveOptions{PruneChildren: true}); err != nil && !errdefs.IsNotFound(err) {
					// In use by a container created meanwhile, say: keep it.
					g.Logger().Warn("gc: image not removed", "image", tag, "err", err)
					rep.Removed = rep.Removed[:len(rep.Removed)-1]
					continue
				}
				_ = rdb.New(g.Redis, g.Keys).ForgetImage(lctx, tag)
			}
		}
	}
	return nil
}

// Run collects every Interval until ctx ends.
func (g *GC) Run(ctx context.Context) {
	interval := g.Interval
	if interval <= 0 {
		interval = 24 * time.Hour
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := g.Collect(ctx); err != nil {
			g.Logger().Warn("image gc failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *GC) Logger() *slog.Logger {
	if g.Log == nil {
		return slog.Default()
	}
	return g.Log
}
