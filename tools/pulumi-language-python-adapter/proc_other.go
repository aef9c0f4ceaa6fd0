//go:build !linux

package main

import "os/exec"

// setParentDeathSignal: only Linux has a parent-death signal; elsewhere the CLI's
// process-group kill and the adapter's own shutdown stop its children.
func setParentDeathSignal(*exec.Cmd) {}
