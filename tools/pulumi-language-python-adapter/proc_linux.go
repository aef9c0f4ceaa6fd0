package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills cmd when the adapter dies, even by SIGKILL: no leaked processes.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
