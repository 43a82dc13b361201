package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Client is the part of the Docker client the image builder uses.
type Client interface {
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
}

var _ Client = (*client.Client)(nil)

// DefaultBaseImage is the worker-base image `make images` builds.
const DefaultBaseImage = "agentvisor/worker-base:latest"

// Builder makes worker images from recipes: worker:<hash>, where the hash
// covers the agent, the capabilities, the base image's ID and the recipe
// version (protocol.Recipe). It keeps no state of its own: the images and
// their labels are in the engine, their last use in Redis.
type Builder struct {
	Docker    Client
	Redis     redis.Cmdable // nil: last use is not recorded
	Keys      protocol.Keys
	BaseImage string        // default DefaultBaseImage
	Network   string        // network of the build containers (default "host": apt-get and npm reach their mirrors)
	Timeout   time.Duration // of one inspect (default 10 s); a build has its own context
	Now       func() time.Time
	// ExtraCACerts is a directory of *.crt files the build's download
	// stage trusts (default /usr/local/share/ca-certificates, the build
	// machine's own additions); they do not reach the final image.
	ExtraCACerts string
	// OnBuild, when set, is told of every build (Metrics.ImageBuilt).
	OnBuild func(agent protocol.AgentType, took time.Duration, err error)
	// Fresh is how long an image EnsureImage found is taken as it is,
	// without asking the engine again (default 10 s; negative: ask every
	// time): a create pays no inspect of the base image and of its own,
	// and a new base image (make images) is used within Fresh. An image
	// removed meanwhile is made again by the create that misses it
	// (Forget).
	Fresh time.Duration

	group singleflight.Group // concurrent EnsureImage calls of one recipe build once

	mu      sync.Mutex
	known   map[string]knownImage // recipe (base, agent, capabilities) → its image, while fresh; guarded by mu
	touched map[string]time.Time  // tag → when its use was last recorded; guarded by mu
}

// knownImage is an image EnsureImage found, and when.
type knownImage struct {
	img Image
	at  time.Time
}

// touchEvery is how often a use of one image is recorded in Redis: the
// image GC counts retention in days.
const touchEvery = time.Minute

// Image is a worker image that exists.
type Image struct {
	Tag   string // worker:<hash>
	ID    string
	Hash  string
	Built bool // this call (or the one it joined) built it
}

// BuildError is a failed image build, with the tail of its log.
type BuildError struct {
	Tag string
	Log string // the last lines the build printed
	Err error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("spawner: build %s: %v\n%s", e.Tag, e.Err, e.Log)
}

func (e *BuildError) Unwrap() error { return e.Err }

func (im *Builder) base() string {
	if im.BaseImage == "" {
		return DefaultBaseImage
	}
	return im.BaseImage
}

func (im *Builder) timeout() time.Duration {
	if im.Timeout <= 0 {
		return 10 * time.Second
	}
	return im.Timeout
}

func (im *Builder) now() time.Time {
	if im.Now != nil {
		return im.Now()
	}
	return time.Now()
}

// Recipe returns the recipe of an agent and capabilities on the current
// base image.
func (im *Builder) Recipe(ctx context.Context, agent protocol.AgentType, caps []protocol.Capability) (protocol.Recipe, error) {
	ictx, cancel := context.WithTimeout(ctx, im.timeout())
	defer cancel()
	base, err := im.Docker.ImageInspect(ictx, im.base())
	if err != nil {
		return protocol.Recipe{}, fmt.Errorf("spawner: base image %s: %w (run `make images`)", im.base(), err)
	}
	norm, err := protocol.NormalizeCapabilities(caps)
	if err != nil {
		return protocol.Recipe{}, err
	}
	return protocol.Recipe{Agent: agent, Capabilities: norm, BaseImage: base.ID, Version: protocol.RecipeVersion}, nil
}

// EnsureImage returns the worker image of an agent and capabilities,
// building it when it does not exist. Concurrent calls for one recipe share
// one build. Every call records the image's use in Redis.
func (im *Builder) EnsureImage(ctx context.Context, agent protocol.AgentType, caps []protocol.Capability) (Image, error) {
	key := im.key(agent, caps)
	if img, ok := im.lookup(key); ok {
		im.touch(ctx, img.Tag)
		return img, nil
	}
	img, err := im.ensure(ctx, agent, caps)
	if err != nil {
		return Image{}, err
	}
	im.remember(key, img)
	im.touch(ctx, img.Tag)
	return img, nil
}

// key names a recipe before its base image is resolved.
func (im *Builder) key(agent protocol.AgentType, caps []protocol.Capability) string {
	norm, err := protocol.NormalizeCapabilities(caps)
	if err != nil {
		return "" // never known: the recipe's own error is returned
	}
	names := make([]string, len(norm))
	for i, c := range norm {
		names[i] = string(c)
	}
	return im.base() + "\x00" + string(agent) + "\x00" + strings.Join(names, ",")
}

func (im *Builder) fresh() time.Duration {
	if im.Fresh == 0 {
		return 10 * time.Second
	}
	return im.Fresh
}

func (im *Builder) lookup(key string) (Image, bool) {
	im.mu.Lock()
	defer im.mu.Unlock()
	k, ok := im.known[key]
	if !ok || key == "" || im.fresh() < 0 || time.Since(k.at) >= im.fresh() {
		return Image{}, false
	}
	img := k.img
	img.Built = false
	return img, true
}

func (im *Builder) remember(key string, img Image) {
	if key == "" || im.fresh() < 0 {
		return
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.known == nil {
		im.known = map[string]knownImage{}
	}
	im.known[key] = knownImage{img: img, at: time.Now()}
}

// Forget drops what EnsureImage knows of tag: its next call asks the
// engine (a create whose image was removed meanwhile).
func (im *Builder) Forget(tag string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for k, v := range im.known {
		if v.img.Tag == tag {
			delete(im.known, k)
		}
	}
	delete(im.touched, tag)
}

// ensure is EnsureImage without what it knows: the engine is asked.
func (im *Builder) ensure(ctx context.Context, agent protocol.AgentType, caps []protocol.Capability) (Image, error) {
	r, err := im.Recipe(ctx, agent, caps)
	if err != nil {
		return Image{}, err
	}
	hash, err := r.Hash()
	if err != nil {
		return Image{}, err
	}
	tag := protocol.ImageRepository + ":" + hash
	v, err, _ := im.group.Do(tag, func() (any, error) {
		ictx, cancel := context.WithTimeout(ctx, im.timeout())
		got, err := im.Docker.ImageInspect(ictx, tag)
		cancel()
		if err == nil {
			return Image{Tag: tag, ID: got.ID, Hash: hash}, nil
		}
		if !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("spawner: inspect %s: %w", tag, err)
		}
		start := time.Now()
		img, err := im.build(ctx, r, tag, hash)
		if im.OnBuild != nil {
			im.OnBuild(agent, time.Since(start), err)
		}
		return img, err
	})
	if err != nil {
		return Image{}, err
	}
	return v.(Image), nil
}

// touch records the image's last use (seed 001 "Touch"), at most every
// touchEvery; the image garbage collector reads it.
func (im *Builder) touch(ctx context.Context, tag string) {
	if im.Redis == nil {
		return
	}
	now := im.now()
	im.mu.Lock()
	if last, ok := im.touched[tag]; ok && now.Sub(last) < touchEvery && now.After(last) {
		im.mu.Unlock()
		return
	}
	if im.touched == nil {
		im.touched = map[string]time.Time{}
	}
	im.touched[tag] = now
	im.mu.Unlock()
	tctx, cancel := context.WithTimeout(ctx, im.timeout())
	defer cancel()
	if err := rdb.New(im.Redis, im.Keys).TouchImage(tctx, tag, now); err != nil {
		im.mu.Lock()
		delete(im.touched, tag) // recorded by the next call
		im.mu.Unlock()
	}
}

// build runs one image build of a recipe.
func (im *Builder) build(ctx context.Context, r protocol.Recipe, tag, hash string) (Image, error) {
	dockerfile, err := Dockerfile(r, r.BaseImage)
	if err != nil {
		return Image{}, err
	}
	canonical, _ := r.Canonical()
	files := map[string][]byte{"Dockerfile": []byte(dockerfile), "extra-ca/": nil}
	caDir := im.ExtraCACerts
	if caDir == "" {
		caDir = "/usr/local/share/ca-certificates"
	}
	if certs, _ := filepath.Glob(filepath.Join(caDir, "*.crt")); len(certs) > 0 {
		for _, c := range certs {
			if b, err := os.ReadFile(c); err == nil {
				files["extra-ca/"+filepath.Base(c)] = b
			}
		}
	}
	network := im.Network
	if network == "" {
		network = "host"
	}
	names := make([]string, len(r.Capabilities))
	for i, c := range r.Capabilities {
		names[i] = string(c)
	}
	img, err := im.run(ctx, 30*time.Minute, files, build.ImageBuildOptions{
		Tags: []string{tag}, NetworkMode: network,
		Labels: map[string]string{
			protocol.LabelManaged:      "true",
			ctlplane.LabelRecipe:       canonical,
			ctlplane.LabelRecipeHash:   hash,
			ctlplane.LabelAgentType:    string(r.Agent),
			ctlplane.LabelCapabilities: strings.Join(names, ","),
		},
	}, nil)
	img.Hash = hash
	return img, err
}

// run builds one image from files (a name ending in "/" is a directory)
// with the legacy builder, its intermediate containers removed, in at
// most timeout. The build has its own context on purpose: a caller that
// gives up must not leave a half-built image for the others that joined
// it. onLine, when set, is told of every line of the build's log.
func (im *Builder) run(ctx context.Context, timeout time.Duration, files map[string][]byte, opts build.ImageBuildOptions, onLine func(string)) (Image, error) {
	tag := opts.Tags[0]
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names) // a directory before its files
	for _, name := range names {
		data := files[name]
		if strings.HasSuffix(name, "/") {
			_ = tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)})
			continue
		}
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write(data)
	}
	_ = tw.Close()
	opts.Dockerfile, opts.Remove, opts.ForceRemove, opts.Version = "Dockerfile", true, true, build.BuilderV1
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	resp, err := im.Docker.ImageBuild(bctx, &buf, opts)
	if err != nil {
		return Image{}, &BuildError{Tag: tag, Err: err}
	}
	defer resp.Body.Close()
	logTail, id, err := readBuildOutput(resp.Body, onLine)
	if bctx.Err() != nil {
		err = fmt.Errorf("the build ran past %s: %w", timeout, bctx.Err())
	}
	if err != nil {
		return Image{}, &BuildError{Tag: tag, Log: logTail, Err: err}
	}
	ictx, icancel := context.WithTimeout(bctx, im.timeout())
	defer icancel()
	got, err := im.Docker.ImageInspect(ictx, tag)
	if err != nil {
		return Image{}, &BuildError{Tag: tag, Log: logTail, Err: fmt.Errorf("built image %s not found: %w", id, err)}
	}
	return Image{Tag: tag, ID: got.ID, Built: true}, nil
}

// readBuildOutput reads the engine's JSON message stream of a build and
// returns the tail of its log, the image ID, and the build's error;
// onLine, when set, is told of every line of the log.
func readBuildOutput(r io.Reader, onLine func(string)) (tail, id string, err error) {
	log := buildLog{onLine: onLine}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
			Aux struct {
				ID string `json:"ID"`
			} `json:"aux"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		log.write(m.Stream)
		if m.Aux.ID != "" {
			id = m.Aux.ID
		}
		if m.Error != "" {
			err = errors.New(m.Error)
		}
	}
	if scanErr := sc.Err(); scanErr != nil && err == nil {
		err = fmt.Errorf("read build output: %w", scanErr)
	}
	return log.String(), id, err
}

// buildLogLines is how many lines of a build's log a BuildError keeps.
const buildLogLines = 40

// buildLog keeps the last lines of a build's log. The engine sends a
// step's output in chunks that need not end at a line's end (a program's
// stderr may come a few bytes at a time, each chunk wrapped in colour
// codes): chunks are joined and the colour codes dropped before the text
// is cut into lines.
type buildLog struct {
	lines   []string
	partial strings.Builder
	onLine  func(string) // nil: none
}

func (b *buildLog) write(chunk string) {
	for _, c := range []byte(stripANSI(chunk)) {
		if c != '\n' {
			b.partial.WriteByte(c)
			continue
		}
		b.lines = append(b.lines, b.partial.String())
		if b.onLine != nil {
			b.onLine(b.partial.String())
		}
		b.partial.Reset()
		if len(b.lines) > buildLogLines {
			b.lines = b.lines[len(b.lines)-buildLogLines:]
		}
	}
}

func (b *buildLog) String() string {
	lines := b.lines
	if b.partial.Len() > 0 {
		lines = append(lines[:len(lines):len(lines)], b.partial.String())
	}
	return strings.Join(lines, "\n")
}

// stripANSI drops the terminal escape sequences (CSI: ESC [ ... final
// byte) that colour a build's stderr.
func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b[") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		out.WriteByte(s[i])
	}
	return out.String()
}
