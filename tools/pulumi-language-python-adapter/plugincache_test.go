package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/proto"
)

// venv makes a virtualenv's shape: pyvenv.cfg, bin/python, one site-packages with a package.
func venv(t *testing.T) (string, string) {
	t.Helper()
	root := t.TempDir()
	site := filepath.Join(root, "lib", "python3.11", "site-packages")
	for _, d := range []string{filepath.Join(root, "bin"), filepath.Join(site, "pulumi"),
		filepath.Join(site, "pulumi-3.0.0.dist-info")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "pyvenv.cfg"), "home = /usr/bin\ninclude-system-site-packages = false\n")
	write(t, filepath.Join(site, "pulumi", "pulumi-plugin.json"), `{"resource": false}`)
	if err := os.Symlink("/bin/sh", filepath.Join(root, "bin", "python")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lib", filepath.Join(root, "lib64")); err != nil {
		t.Fatal(err)
	}
	return root, site
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustKey(t *testing.T, c pluginCache) string {
	t.Helper()
	k, ok := c.key()
	if !ok {
		t.Fatalf("%+v: not cacheable", c)
	}
	return k
}

func TestKeyIsStableAndSharedByProjects(t *testing.T) {
	root, _ := venv(t)
	c := pluginCache{venv: root, cwd: t.TempDir()}
	a := mustKey(t, c)
	if b := mustKey(t, c); a != b {
		t.Fatalf("same virtualenv, keys %s and %s", a, b)
	}
	if b := mustKey(t, pluginCache{venv: root, cwd: t.TempDir()}); a != b {
		t.Fatal("another project on the same virtualenv has another key")
	}
}

func TestKeyChangesWithWhatPipWouldList(t *testing.T) {
	root, site := venv(t)
	c := pluginCache{venv: root, cwd: t.TempDir()}
	src := t.TempDir()
	changes := []struct {
		name string
		do   func()
	}{
		{"a package installed", func() {
			if err := os.Mkdir(filepath.Join(site, "pulumi_aws-6.0.0.dist-info"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"a package's pulumi-plugin.json edited in place", func() {
			write(t, filepath.Join(site, "pulumi", "pulumi-plugin.json"), `{"resource": true, "name": "x"}`)
		}},
		{"a .pth file written", func() { write(t, filepath.Join(site, "extra.pth"), "import os\n"+src+"\n") }},
		{"a distribution in a directory a .pth adds", func() {
			if err := os.Mkdir(filepath.Join(src, "pulumi_gcp-7.0.0.dist-info"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"an entry's time changed", func() {
			at := time.Now().Add(time.Hour)
			if err := os.Chtimes(filepath.Join(site, "pulumi-3.0.0.dist-info"), at, at); err != nil {
				t.Fatal(err)
			}
		}},
		{"pyvenv.cfg edited", func() {
			write(t, filepath.Join(root, "pyvenv.cfg"), "home = /opt/python/bin\ninclude-system-site-packages = false\n")
		}},
		{"PYTHONPATH set", func() { t.Setenv("PYTHONPATH", "/elsewhere") }},
	}
	before := mustKey(t, c)
	for _, ch := range changes {
		ch.do()
		after := mustKey(t, c)
		if after == before {
			t.Errorf("%s: the key did not change", ch.name)
		}
		before = after
	}
}

func TestNotCacheableWhereTheVirtualenvIsNotAll(t *testing.T) {
	root, _ := venv(t)
	cwd := t.TempDir()
	c := pluginCache{venv: root, cwd: cwd}
	if err := os.Mkdir(filepath.Join(cwd, "mine-0.1.dist-info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.key(); ok {
		t.Error("a project holding a distribution (first on python -m's path) is cacheable")
	}
	if err := os.Remove(filepath.Join(cwd, "mine-0.1.dist-info")); err != nil {
		t.Fatal(err)
	}
	mustKey(t, c)
	write(t, filepath.Join(root, "pyvenv.cfg"), "home = /usr/bin\ninclude-system-site-packages = true\n")
	if _, ok := c.key(); ok {
		t.Error("a virtualenv with the system's site-packages is cacheable")
	}
	if err := os.Remove(filepath.Join(root, "pyvenv.cfg")); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.key(); ok {
		t.Error("a directory without pyvenv.cfg is cacheable")
	}
	if _, ok := (pluginCache{venv: filepath.Join(root, "absent"), cwd: cwd}).key(); ok {
		t.Error("a missing virtualenv is cacheable")
	}
}

func answer(t *testing.T, plugins ...string) frame {
	t.Helper()
	r := &pulumirpc.GetRequiredPluginsResponse{}
	for _, p := range plugins {
		r.Plugins = append(r.Plugins, &pulumirpc.PluginDependency{Name: p, Kind: "resource", Version: "1.2.3"})
	}
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return frame(b)
}

func TestStoreThenLoadGivesTheHostsAnswerBack(t *testing.T) {
	root, _ := venv(t)
	c := pluginCache{venv: root, cwd: t.TempDir()}
	key := mustKey(t, c)
	if _, ok := c.load(key); ok {
		t.Fatal("an answer before any was stored")
	}
	c.store(key, answer(t, "aws"))
	got, ok := c.load(key)
	if !ok {
		t.Fatal("the stored answer was not loaded")
	}
	r := &pulumirpc.GetRequiredPluginsResponse{}
	if err := proto.Unmarshal(got, r); err != nil || len(r.Plugins) != 1 || r.Plugins[0].Name != "aws" {
		t.Fatalf("loaded %v (%v)", r, err)
	}
	// the cache lives in the virtualenv, outside site-packages: storing does not change the key
	if again := mustKey(t, c); again != key {
		t.Fatal("storing an answer changed the key")
	}
	write(t, c.path(key), "\xff\xff not a message")
	if _, ok := c.load(key); ok {
		t.Fatal("a damaged answer was loaded")
	}
}

func TestTheLeastRecentlyUsedAnswersGo(t *testing.T) {
	root, _ := venv(t)
	c := pluginCache{venv: root}
	old := time.Now().Add(-time.Hour)
	for i := 0; i < pluginCacheKeep; i++ {
		key := fmt.Sprintf("k%02d", i)
		c.store(key, answer(t))
		if err := os.Chtimes(c.path(key), old, old.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.load("k00"); !ok { // the oldest, used again now
		t.Fatal("k00 not kept")
	}
	c.store("new", answer(t))
	entries, err := os.ReadDir(filepath.Join(root, pluginCacheDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != pluginCacheKeep {
		t.Fatalf("%d answers kept, want %d", len(entries), pluginCacheKeep)
	}
	for _, gone := range []string{"k01"} {
		if _, err := os.Stat(c.path(gone)); !os.IsNotExist(err) {
			t.Errorf("%s, the least recently used, was kept", gone)
		}
	}
	for _, kept := range []string{"k00", "k02", "new"} {
		if _, err := os.Stat(c.path(kept)); err != nil {
			t.Errorf("%s was dropped", kept)
		}
	}
}
