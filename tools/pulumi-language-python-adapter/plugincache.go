package main

// The host answers GetRequiredPlugins by running `python -m pip list -v --format json` in the
// program's virtualenv, for every preview, up, refresh and destroy: 0.4-0.6 CPU-s on this
// project's machine, serial before the program starts, the largest fixed cost of a small
// preview. Its answer depends only on what pip reads (see key), so the adapter keeps the
// host's answer in the virtualenv under a key made of that, and gives it back while it has not
// changed. Any doubt (no virtualenv, system site-packages on the path, a distribution in the
// project, a cache that cannot be read or written) means the host is asked, as before.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

const (
	requiredPluginsMethod = "/pulumirpc.LanguageRuntime/GetRequiredPlugins"
	pluginCacheDir        = ".pulumi-required-plugins" // inside the virtualenv: it goes with it
	pluginCacheKeep       = 64                         // answers kept; the least recently used go
)

type pluginCache struct {
	venv string // absolute
	cwd  string // where the host runs pip: the adapter's own directory, which it inherits
}

// key names the host's answer: the interpreter's environment variables that move sys.path,
// the virtualenv's configuration, every entry of its site-packages (name, size, time, and a
// package's pulumi-plugin.json, which the host reads) and the distributions in the directories
// its .pth files add. The request is not part of it: the v3.68 host answers from those alone,
// so every project on one virtualenv shares the answer. ok is false where the answer may
// depend on more: the system's site-packages, or a distribution in the directory the host runs
// pip in (first on `python -m`'s sys.path).
func (c pluginCache) key() (string, bool) {
	if own, err := distributions(c.cwd); err != nil || len(own) > 0 {
		return "", false
	}
	h := sha256.New()
	field := func(parts ...string) {
		for _, s := range parts {
			fmt.Fprintf(h, "%d:%s", len(s), s)
		}
	}
	field(requiredPluginsMethod)
	for _, name := range []string{"PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE"} {
		v, set := os.LookupEnv(name)
		field(name, fmt.Sprint(set), v)
	}
	cfg, err := os.ReadFile(filepath.Join(c.venv, "pyvenv.cfg"))
	if err != nil || systemSitePackages(cfg) {
		return "", false
	}
	field("pyvenv.cfg", string(cfg))
	python, err := filepath.EvalSymlinks(filepath.Join(c.venv, "bin", "python"))
	if err != nil {
		return "", false
	}
	field("python", python)
	dirs, _ := filepath.Glob(filepath.Join(c.venv, "lib*", "python*", "site-packages"))
	seen := map[string]bool{}
	for _, dir := range dirs {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", false
		}
		if seen[real] { // lib64 -> lib
			continue
		}
		seen[real] = true
		entries, err := os.ReadDir(real)
		if err != nil {
			return "", false
		}
		field("site-packages", real)
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				return "", false // removed while listed: pip is installing or removing
			}
			field(e.Name(), info.Mode().String(), fmt.Sprint(info.Size(), info.ModTime().UnixNano()))
			if strings.HasSuffix(e.Name(), ".pth") { // the directories it adds are scanned too
				added, err := pthDistributions(filepath.Join(real, e.Name()))
				if err != nil {
					return "", false
				}
				field(added...)
			}
			if e.IsDir() {
				if pj, err := os.Stat(filepath.Join(real, e.Name(), "pulumi-plugin.json")); err == nil {
					field("pulumi-plugin.json", fmt.Sprint(pj.Size(), pj.ModTime().UnixNano()))
				}
			}
		}
	}
	if len(seen) == 0 {
		return "", false
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// distributions lists what pip would find in dir as installed distributions (name, size, time).
func distributions(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".dist-info", ".egg-info", ".egg", ".egg-link":
			info, err := e.Info()
			if err != nil {
				return nil, err
			}
			found = append(found, e.Name(), fmt.Sprint(info.Size(), info.ModTime().UnixNano()))
		}
	}
	return found, nil
}

// pthDistributions: the distributions in the directories a .pth file puts on sys.path (its
// lines that are not comments or imports; a directory that does not exist adds nothing).
func pthDistributions(pth string) ([]string, error) {
	text, err := os.ReadFile(pth)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "import ") ||
			strings.HasPrefix(line, "import\t") {
			continue
		}
		dir := line
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(filepath.Dir(pth), dir)
		}
		d, err := distributions(dir)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found = append(append(found, dir), d...)
	}
	return found, nil
}

// systemSitePackages: a virtualenv that sees the system's packages depends on more than itself.
func systemSitePackages(cfg []byte) bool {
	for _, line := range strings.Split(string(cfg), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "include-system-site-packages" {
			return !strings.EqualFold(strings.TrimSpace(v), "false")
		}
	}
	return false
}

func (c pluginCache) path(key string) string {
	return filepath.Join(c.venv, pluginCacheDir, key)
}

// load returns the answer kept under key, if it is one.
func (c pluginCache) load(key string) (frame, bool) {
	b, err := os.ReadFile(c.path(key))
	if err != nil || proto.Unmarshal(b, &pulumirpc.GetRequiredPluginsResponse{}) != nil {
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(c.path(key), now, now) // recently used
	return frame(b), true
}

// store keeps the host's answer (written whole, then renamed: concurrent runs share the
// virtualenv) and drops the least recently used beyond pluginCacheKeep. Best effort.
func (c pluginCache) store(key string, answer frame) {
	dir := filepath.Join(c.venv, pluginCacheDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(answer)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), c.path(key)) != nil {
		_ = os.Remove(tmp.Name())
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) <= pluginCacheKeep {
		return
	}
	type kept struct {
		name string
		used int64
	}
	var all []kept
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !strings.HasPrefix(e.Name(), ".tmp-") {
			all = append(all, kept{e.Name(), info.ModTime().UnixNano()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used > all[j].used })
	for _, k := range all[min(len(all), pluginCacheKeep):] {
		_ = os.Remove(filepath.Join(dir, k.name))
	}
}

// requiredPlugins answers GetRequiredPlugins from the cache, or asks the host and keeps a
// successful answer.
func (p *proxy) requiredPlugins(ss grpc.ServerStream) error {
	var req frame
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	key, cacheable := p.plugins.key()
	if cacheable {
		if answer, ok := p.plugins.load(key); ok {
			return ss.SendMsg(&answer)
		}
	}
	var answer frame
	if err := p.host.Invoke(outgoing(ss.Context()), requiredPluginsMethod, &req, &answer); err != nil {
		return err // the host's status, as is
	}
	if cacheable {
		p.plugins.store(key, answer)
	}
	return ss.SendMsg(&answer)
}
