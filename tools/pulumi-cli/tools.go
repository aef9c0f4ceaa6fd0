//go:build tools

// Package tools pins the Pulumi CLI so `go build` can produce it from the
// Go module proxy (no registry reachable here ships the binary).
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
