//go:build tools

// Package tools pins the parts of the lab's K3s control plane that come from
// k8s.io/kubernetes (kube-apiserver and kubectl) so `go build` can produce them
// from the Go module proxy; no registry reachable here serves K3s itself.
// kine (K3s's datastore shim) is built from its own module, github.com/k3s-io/kine.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
